#pragma once
// A one-line progress bar on stderr, drawn only when stderr is a terminal so that logs and CI
// output stay free of carriage returns. Thread-safe: workers report as they finish.
#include <cstddef>
#include <mutex>
#include <string>

namespace conv3djit::cli {

class Progress {
 public:
  explicit Progress(size_t total);
  ~Progress();  // erases the bar
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// One more item is done; `label` says which.
  void advance(const std::string& label);

 private:
  std::mutex mutex_;
  size_t total_;
  size_t done_ = 0;
  bool enabled_;
};

}  // namespace conv3djit::cli
