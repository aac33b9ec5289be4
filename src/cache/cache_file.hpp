#pragma once
// The disk cache's file format and file I/O: one cache file is magic, u32 format version, u32 key
// size, key, u64 payload size, payload, u64 FNV-1a of all bytes before it (integers
// little-endian); files are written to a temp file beside their name and renamed over it.
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <climits>
#include <filesystem>
#include <string>
#include <string_view>

namespace conv3djit::detail {

inline constexpr std::string_view kMagic = "C3JCUBIN";  // first bytes of every cache file
// Bump on any change to the layout or meaning of a cache file: old files then fail the check and
// are rebuilt instead of being misread.
inline constexpr uint32_t kFormatVersion = 1;

inline constexpr std::string_view kTempPrefix = ".tmp-";  // names of files being written

// Appends a little-endian integer.
template <class T>
inline void put(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Takes `size` bytes, or a little-endian integer, off the front of `in`; false if too short.
inline bool take(std::string_view& in, uint64_t size, std::string_view* out) {
  if (size > in.size()) return false;
  *out = in.substr(0, size);
  in.remove_prefix(size);
  return true;
}

template <class T>
inline bool take(std::string_view& in, T* out) {
  std::string_view b;
  if (!take(in, sizeof(T), &b)) return false;
  *out = 0;
  for (size_t i = 0; i < sizeof(T); ++i) *out |= T{static_cast<unsigned char>(b[i])} << (8 * i);
  return true;
}

struct Fd {  // closes on scope exit
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

/// strerror(errno), for messages.
std::string errno_text();

/// The bytes of a cache file holding key and payload.
std::string encode_entry(std::string_view key, std::string_view payload);

/// Checks every field of a cache file; returns what is wrong, or "" with key and payload set.
std::string decode_entry(std::string_view file, std::string_view* key, std::string_view* payload);

/// Reads all of an open file, a regular one by its size and anything else (a pipe) to its end;
/// false (errno set) if it cannot, or (EFBIG) if it holds more than max_bytes.
bool read_fd(int fd, std::string* out, uint64_t max_bytes = UINT64_MAX);
/// As read_fd for a named file; "-" is standard input.
bool read_file(const std::string& path, std::string* out);

/// Writes data to a fresh temp file beside `path` (mode `mode`), then renames it over `path`: a
/// reader sees the old file or the new one, never a part. No fsync: after a power loss the
/// checksum turns a torn file into a miss. Returns "" or what failed.
std::string write_atomically(const std::filesystem::path& path, std::string_view data, mode_t mode = 0600);

/// Writes a file the user named: "-" is standard output; a device or pipe is written in place;
/// a symbolic link is followed and its target replaced atomically, never the link itself.
/// Returns "" or what failed.
std::string write_output(const std::string& path, std::string_view data);

}  // namespace conv3djit::detail
