#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace conv3djit::cli {
namespace {
constexpr size_t kBarWidth = 30;
constexpr size_t kLabelWidth = 40;
}  // namespace

Progress::Progress(size_t total) : total_(total), enabled_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() {
  if (enabled_ && done_ > 0) fmt::print(stderr, "\r\033[K");
}

void Progress::advance(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++done_;
  if (!enabled_) return;
  const size_t filled = total_ == 0 ? kBarWidth : done_ * kBarWidth / total_;
  // \033[K clears what a longer previous label left behind.
  fmt::print(stderr, "\r[{}{}] {}/{} {}\033[K", std::string(filled, '#'),
             std::string(kBarWidth - filled, ' '), done_, total_, label.substr(0, kLabelWidth));
  std::fflush(stderr);
}

}  // namespace conv3djit::cli
