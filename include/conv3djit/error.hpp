#pragma once
/// conv3djit's one exception type: a category callers can branch on and a message that names the
/// offending field and value ("stride[W] = 0: stride must be >= 1").
#include <stdexcept>
#include <string>

#include "conv3djit/export.hpp"

namespace conv3djit {

enum class ErrorCategory {
  InvalidArgument,  ///< the description or tensors are wrong; nothing was launched or written
  Unsupported,      ///< valid for PyTorch, but not served by this build (dtype, layout, ...)
  CompileFailed,    ///< NVRTC refused a generated kernel; the message carries its log
  DriverError,      ///< a CUDA Driver API call failed
  NoDevice,         ///< no CUDA driver or no CUDA device on this machine
  CacheIO,          ///< reading or writing the kernel cache failed (only from explicit cache calls)
  CacheMiss,        ///< the kernel is not cached and compiling is off (CompileMode::Never)
};

/// Stable lower-case name of a category ("invalid_argument", ...).
CONV3DJIT_API const char* to_string(ErrorCategory category) noexcept;

class CONV3DJIT_API Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message);
  ErrorCategory category() const noexcept { return category_; }
  /// The message alone; what() is "category: message".
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCategory category_;
  std::string message_;
};

}  // namespace conv3djit
