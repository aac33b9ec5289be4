#include "cache/cache_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <functional>
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

bool read_fd(int fd, std::string* out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out->assign(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out->size()) {
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
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd.fd >= 0 && read_fd(fd.fd, out);
}

std::string write_atomically(const std::filesystem::path& path, std::string_view data) {
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path temp =
      path.parent_path() / fmt::format("{}{}-{:x}-{}", kTempPrefix, ::getpid(),
                                       std::hash<std::thread::id>{}(std::this_thread::get_id()),
                                       counter++);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot create '{}': {}", temp.string(), errno_text());
  std::string error;
  for (std::string_view rest = data; !rest.empty() && error.empty();) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n > 0) {
      rest.remove_prefix(static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      error = fmt::format("cannot write '{}': {}", temp.string(), errno_text());
    }
  }
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

}  // namespace conv3djit::detail
