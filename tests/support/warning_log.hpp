#pragma once
// WarningLog: collects the library's warnings (and errors), and keeps them off stderr, while it lives.
#include <spdlog/sinks/base_sink.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/log.hpp"

namespace conv3djit::test {

class WarningLog {
 public:
  WarningLog() : sink_(std::make_shared<Sink>()) {
    spdlog::logger& logger = conv3djit::detail::log();
    saved_level_ = logger.level();
    logger.set_level(spdlog::level::warn);
    for (const spdlog::sink_ptr& s : logger.sinks()) {
      saved_sinks_.emplace_back(s, s->level());
      s->set_level(spdlog::level::off);
    }
    logger.sinks().push_back(sink_);
  }
  ~WarningLog() {
    spdlog::logger& logger = conv3djit::detail::log();
    logger.sinks().pop_back();
    for (auto& [s, level] : saved_sinks_) s->set_level(level);
    logger.set_level(saved_level_);
  }
  WarningLog(const WarningLog&) = delete;
  WarningLog& operator=(const WarningLog&) = delete;

  std::vector<std::string> messages() const {
    std::lock_guard<std::mutex> lock(sink_->mutex_);
    return sink_->messages;
  }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    std::vector<std::string> messages;
    void sink_it_(const spdlog::details::log_msg& msg) override {
      messages.emplace_back(msg.payload.data(), msg.payload.size());
    }
    void flush_() override {}
    using spdlog::sinks::base_sink<std::mutex>::mutex_;
  };
  std::shared_ptr<Sink> sink_;
  spdlog::level::level_enum saved_level_;
  std::vector<std::pair<spdlog::sink_ptr, spdlog::level::level_enum>> saved_sinks_;
};

}  // namespace conv3djit::test
