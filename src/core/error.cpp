#include "conv3djit/error.hpp"

namespace conv3djit {

const char* to_string(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::InvalidArgument: return "invalid_argument";
    case ErrorCategory::Unsupported: return "unsupported";
    case ErrorCategory::CompileFailed: return "compile_failed";
    case ErrorCategory::DriverError: return "driver_error";
    case ErrorCategory::NoDevice: return "no_device";
    case ErrorCategory::CacheIO: return "cache_io";
    case ErrorCategory::CacheMiss: return "cache_miss";
  }
  return "unknown";
}

Error::Error(ErrorCategory category, const std::string& message)
    : std::runtime_error(std::string(to_string(category)) + ": " + message), category_(category), message_(message) {}

}  // namespace conv3djit
