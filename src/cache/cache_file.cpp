#include "cache/cache_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <random>
#include <system_error>
#include <thread>

#include "core/hash.hpp"

namespace conv3djit::detail {

std::string errno_text() { return std::generic_category().message(errno); }

std::string encode_entry(std::string_view key, std::string_view payload) {
  std::string out;
  out.reserve(kMagic.size() + 16 + key.size() + payload.size() + 8);
  out += kMagic;
  put<uint32_t>(out, kFormatVersion);
  put(out, static_cast<uint32_t>(key.size()));
  out += key;
  put<uint64_t>(out, payload.size());
  out += payload;
  put(out, fnv1a64(out));
  return out;
}

std::string decode_entry(std::string_view file, std::string_view* key, std::string_view* payload) {
  if (file.empty()) return "empty file";
  std::string_view in = file, magic;
  uint32_t version = 0, key_size = 0;
  uint64_t payload_size = 0, checksum = 0;
  if (!take(in, kMagic.size(), &magic) || magic != kMagic) return "not a cache file (bad magic)";
  if (!take(in, &version)) return "truncated header";
  if (version != kFormatVersion) {
    return fmt::format("format version {}, expected {}", version, kFormatVersion);
  }
  if (!take(in, &key_size) || !take(in, key_size, key) || !take(in, &payload_size) ||
      !take(in, payload_size, payload) || !take(in, &checksum)) {
    return "truncated";
  }
  if (!in.empty()) return "trailing bytes";
  if (checksum != fnv1a64(file.substr(0, file.size() - 8))) return "checksum mismatch";
  return "";
}

bool read_fd(int fd, std::string* out, uint64_t max_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  const bool regular = S_ISREG(st.st_mode);
  if (regular && static_cast<uint64_t>(st.st_size) > max_bytes) {
    errno = EFBIG;
    return false;
  }
  // A regular file is read by its size; a pipe or terminal has none and is read to its end.
  out->assign(regular ? static_cast<size_t>(st.st_size) : 0, '\0');
  size_t done = 0;
  for (;;) {
    if (done == out->size()) {
      if (regular) break;
      if (out->size() >= max_bytes) {
        errno = EFBIG;
        return false;
      }
      out->resize(std::max<size_t>(2 * out->size(), 1 << 16));
    }
    const ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  return true;
}

bool read_file(const std::string& path, std::string* out) {
  if (path == "-") return read_fd(STDIN_FILENO, out);
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd.fd >= 0 && read_fd(fd.fd, out);
}

namespace {

// Writes all of data to fd; "" or what failed.
std::string write_all(int fd, std::string_view data, const std::string& name) {
  for (std::string_view rest = data; !rest.empty();) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n > 0) {
      rest.remove_prefix(static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      return fmt::format("cannot write '{}': {}", name, errno_text());
    }
  }
  return "";
}

// A name no other writer uses: a dead writer's leftover with the same pid (after a crash and pid
// reuse) must not block this one, so the name carries random bits, and a clash is retried.
std::filesystem::path temp_name(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t process_salt = std::random_device{}() * 0x9E3779B97F4A7C15ull ^
                                       static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t salt = process_salt ^ (std::hash<std::thread::id>{}(std::this_thread::get_id()) * 31) ^ counter++;
  return path.parent_path() / fmt::format("{}{}-{:016x}", kTempPrefix, ::getpid(), salt);
}

}  // namespace

std::string write_atomically(const std::filesystem::path& path, std::string_view data, mode_t mode) {
  std::filesystem::path temp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    temp = temp_name(path);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return fmt::format("cannot create '{}': {}", temp.string(), errno_text());
  std::string error = write_all(fd, data, temp.string());
  if (::close(fd) != 0 && error.empty()) {
    error = fmt::format("cannot write '{}': {}", temp.string(), errno_text());
  }
  if (error.empty() && ::rename(temp.c_str(), path.c_str()) != 0) {
    error =
        fmt::format("cannot rename '{}' to '{}': {}", temp.string(), path.string(), errno_text());
  }
  if (!error.empty()) ::unlink(temp.c_str());
  return error;
}

std::string write_output(const std::string& path, std::string_view data) {
  if (path == "-") return write_all(STDOUT_FILENO, data, "standard output");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) return fmt::format("'{}' is a folder", path);
    // /dev/stdout, a FIFO, a device: written where it is; there is nothing to rename over.
    const Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.fd < 0) return fmt::format("cannot open '{}': {}", path, errno_text());
    return write_all(fd.fd, data, path);
  }
  std::error_code ec;
  // A link (also a dangling one) keeps pointing where it did: its target is what gets replaced.
  const std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  if (ec) return fmt::format("cannot resolve '{}': {}", path, ec.message());
  return write_atomically(target, data, 0644);
}

}  // namespace conv3djit::detail
