#include "cache/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <tuple>
#include <utility>

#include "conv3djit/error.hpp"
#include "cache/cache_file.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"

namespace conv3djit::detail {
namespace {

namespace fs = std::filesystem;

// Archive: magic, u64 count, count x (u64 size, cache file bytes), u64 FNV-1a of all before it.
constexpr std::string_view kArchiveMagic = "C3JARCH1";
constexpr std::string_view kEntrySuffix = ".cubin";
constexpr size_t kNameDigits = 32;
// A temp file this old belongs to a writer that died; a younger one may still be renamed.
constexpr int64_t kStaleTempNs = 3600ll * 1000000000ll;

fs::path entry_path(const std::string& dir, std::string_view key) {
  const std::string name = hash128_hex(key);
  return fs::path(dir) / name.substr(0, 2) / (name + std::string(kEntrySuffix));
}

// Deletes a bad file, unless a writer has meanwhile renamed a good one over its name.
void discard(const std::string& path, int open_fd) {
  struct stat opened, named;
  if (::fstat(open_fd, &opened) == 0 && ::stat(path.c_str(), &named) == 0 &&
      opened.st_dev == named.st_dev && opened.st_ino == named.st_ino) {
    ::unlink(path.c_str());
  }
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec;
}

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

struct FileStat {
  std::string path;
  uint64_t bytes;
  int64_t mtime_ns;
};

// The entries under dir (not checked beyond their names); optionally deletes stale temp files.
std::vector<FileStat> scan(const std::string& dir, bool remove_stale_temps) {
  std::vector<FileStat> out;
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::error_code ec;
  for (fs::directory_iterator sub(dir, ec), end; !ec && sub != end; sub.increment(ec)) {
    const std::string sub_name = sub->path().filename().string();
    if (sub_name.size() != 2 || !is_hex(sub_name)) continue;
    std::error_code sub_ec;
    for (fs::directory_iterator it(sub->path(), sub_ec); !sub_ec && it != end;
         it.increment(sub_ec)) {
      const std::string path = it->path().string();
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.rfind(kTempPrefix, 0) == 0) {
        if (remove_stale_temps && now_ns - mtime_ns(st) > kStaleTempNs) ::unlink(path.c_str());
      } else if (name.size() == kNameDigits + kEntrySuffix.size() &&
                 name.compare(kNameDigits, std::string::npos, kEntrySuffix) == 0 &&
                 is_hex(std::string_view(name).substr(0, kNameDigits))) {
        out.push_back({path, static_cast<uint64_t>(st.st_size), mtime_ns(st)});
      }
    }
  }
  return out;
}

// The key text from a file's header, for listings; the rest of the file is not checked.
std::optional<std::string> read_key(const std::string& path, uint64_t file_size) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string head(kMagic.size() + 8, '\0');
  if (fd.fd < 0 ||
      ::pread(fd.fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    return std::nullopt;
  }
  std::string_view in = head, magic;
  uint32_t version = 0, key_size = 0;
  if (!take(in, kMagic.size(), &magic) || magic != kMagic || !take(in, &version) ||
      version != kFormatVersion || !take(in, &key_size) || key_size > file_size - head.size()) {
    return std::nullopt;
  }
  std::string key(key_size, '\0');
  if (::pread(fd.fd, key.data(), key.size(), static_cast<off_t>(head.size())) !=
      static_cast<ssize_t>(key.size())) {
    return std::nullopt;
  }
  return key;
}

// Whether dir is a writable folder, or could be made: its nearest existing ancestor is one.
bool writable_dir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!ec) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0)
      return S_ISDIR(st.st_mode) && ::access(p.c_str(), W_OK | X_OK) == 0;
    if (errno != ENOENT || p == p.parent_path()) return false;
    p = p.parent_path();
  }
  return false;
}

}  // namespace

DiskCache::DiskCache(std::string dir, uint64_t limit_bytes)
    : dir_(dir.empty() ? default_dir() : std::move(dir)), limit_bytes_(limit_bytes) {
  if (dir_.empty()) disable("no cache folder: set CONV3DJIT_CACHE_DIR or HOME");
}

std::string DiskCache::default_dir() {
  const auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value ? value : "";
  };
  if (std::string dir = env("CONV3DJIT_CACHE_DIR"); !dir.empty()) return dir;
  // The XDG base directory spec says to ignore a relative path.
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/') {
    return (fs::path(xdg) / "conv3djit").string();
  }
  std::string home = env("HOME");
  if (home.empty()) {
    passwd pw{}, *found = nullptr;
    char buffer[4096];
    if (::getpwuid_r(::getuid(), &pw, buffer, sizeof buffer, &found) == 0 && found && pw.pw_dir) {
      home = pw.pw_dir;
    }
  }
  return home.empty() ? "" : (fs::path(home) / ".cache" / "conv3djit").string();
}

std::optional<std::string> DiskCache::load(const std::string& key) noexcept {
  if (dir_.empty()) return std::nullopt;
  try {
    const std::string path = entry_path(dir_, key).string();
    const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) return std::nullopt;  // the usual miss: no such file
    std::string file;
    std::string_view file_key, payload;
    std::string why = read_fd(fd.fd, &file) ? decode_entry(file, &file_key, &payload)
                                            : "cannot read: " + errno_text();
    if (why.empty() && file_key != key) why = "it holds another key (hash collision or moved file)";
    if (!why.empty()) {
      log().warn("disk cache: dropping '{}': {}", path, why);
      discard(path, fd.fd);
      return std::nullopt;
    }
    ::futimens(fd.fd, nullptr);  // mtime = last use, the order of LRU eviction
    return std::string(payload);
  } catch (...) {
    return std::nullopt;  // out of memory: a miss, the kernel is compiled instead
  }
}

void DiskCache::store(const std::string& key, const std::string& payload) noexcept {
  if (write_entry(key, payload)) evict(key);
}

bool DiskCache::write_entry(std::string_view key, std::string_view payload) noexcept {
  if (!enabled()) return false;
  try {
    const fs::path path = entry_path(dir_, key);
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    std::string error =
        ec ? fmt::format("cannot create '{}': {}", path.parent_path().string(), ec.message())
           : write_atomically(path, encode_entry(key, payload));
    if (error.empty()) return true;
    disable(error);
  } catch (const std::exception& e) {
    disable(e.what());
  }
  return false;
}

void DiskCache::evict(std::string_view keep_key) const noexcept {
  try {
    const std::string keep = keep_key.empty() ? "" : entry_path(dir_, keep_key).string();
    // One process scans at a time; a store that finds the lock taken skips, since the holder is
    // already trimming and the next store catches what it missed. The kernel drops an flock when
    // its holder dies, so a killed process never blocks anyone.
    const Fd lock(::open((fs::path(dir_) / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lock.fd < 0 || ::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) return;
    std::vector<FileStat> files = scan(dir_, true);
    uint64_t total = 0;
    for (const FileStat& f : files) total += f.bytes;
    if (total <= limit_bytes_) return;
    // Least recently used first; the file just written last, so it goes only if it alone is over.
    std::sort(files.begin(), files.end(), [&](const FileStat& a, const FileStat& b) {
      const bool a_kept = a.path == keep, b_kept = b.path == keep;
      return std::tie(a_kept, a.mtime_ns, a.path) < std::tie(b_kept, b.mtime_ns, b.path);
    });
    for (const FileStat& f : files) {
      if (total <= limit_bytes_) break;
      if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) total -= f.bytes;
    }
  } catch (...) {  // out of memory: the folder stays over its limit until the next store
  }
}

void DiskCache::disable(const std::string& reason) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (disabled_) return;
  disabled_ = true;
  try {
    log().warn("disk cache '{}' disabled, kernels are kept in memory only: {}", dir_, reason);
  } catch (...) {  // no logger (out of memory): memory-only all the same
  }
}

void DiskCache::remove(const std::string& key) noexcept {
  if (dir_.empty()) return;
  try {
    ::unlink(entry_path(dir_, key).c_str());
  } catch (...) {  // out of memory: the entry stays until its next load checks it
  }
}

std::vector<CacheEntry> DiskCache::entries() const {
  std::vector<CacheEntry> out;
  for (const FileStat& f : scan(dir_, false)) {
    if (std::optional<std::string> key = read_key(f.path, f.bytes)) {
      CacheEntry e;
      e.key = std::move(*key);
      e.path = f.path;
      e.bytes = f.bytes;
      e.last_use_unix = f.mtime_ns / 1000000000;
      out.push_back(std::move(e));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CacheEntry& a, const CacheEntry& b) { return a.key < b.key; });
  return out;
}

CacheInfo DiskCache::info() const {
  CacheInfo info;
  info.dir = dir_;
  info.writable = enabled() && writable_dir(dir_);
  info.limit_bytes = limit_bytes_;
  for (const FileStat& f : scan(dir_, false)) {
    info.bytes += f.bytes;
    ++info.entries;
  }
  return info;
}

uint64_t DiskCache::clear() {
  uint64_t removed = 0;
  // Young temp files are left alone: their writers are about to rename them.
  for (const FileStat& f : scan(dir_, true)) {
    if (::unlink(f.path.c_str()) == 0) {
      ++removed;
    } else if (errno != ENOENT) {
      throw Error(ErrorCategory::CacheIO,
                  fmt::format("cannot remove '{}': {}", f.path, errno_text()));
    }
  }
  return removed;
}

uint64_t DiskCache::export_archive(const std::string& path) const {
  std::string archive(kArchiveMagic);
  put<uint64_t>(archive, 0);  // the count, patched below
  uint64_t count = 0;
  for (const FileStat& f : scan(dir_, false)) {
    std::string file;
    std::string_view key, payload;
    if (!read_file(f.path, &file)) continue;  // removed meanwhile
    if (const std::string why = decode_entry(file, &key, &payload); !why.empty()) {
      log().warn("disk cache: not exporting '{}': {}", f.path, why);
      continue;
    }
    put<uint64_t>(archive, file.size());
    archive += file;
    ++count;
  }
  std::string count_bytes;
  put(count_bytes, count);
  archive.replace(kArchiveMagic.size(), 8, count_bytes);
  put(archive, fnv1a64(archive));
  if (const std::string error = write_atomically(path, archive); !error.empty()) {
    throw Error(ErrorCategory::CacheIO,
                fmt::format("cannot export the cache to '{}': {}", path, error));
  }
  return count;
}

uint64_t DiskCache::import_archive(const std::string& path) {
  const auto fail = [&](const std::string& what) {
    return Error(ErrorCategory::CacheIO, fmt::format("cannot import archive '{}': {}", path, what));
  };
  std::string archive;
  if (!read_file(path, &archive)) throw fail(errno_text());
  std::string_view in = archive, magic, sum;
  uint64_t checksum = 0, count = 0;
  if (!take(in, kArchiveMagic.size(), &magic) || magic != kArchiveMagic) {
    throw fail("not a conv3djit cache archive (bad magic)");
  }
  if (!take(in, &count) || in.size() < 8) throw fail("truncated");
  sum = in.substr(in.size() - 8);
  in.remove_suffix(8);
  if (!take(sum, &checksum) || checksum != fnv1a64(archive.data(), archive.size() - 8)) {
    throw fail("checksum mismatch (corrupt or truncated)");
  }
  // Every entry is checked before the first is stored, so a bad archive imports nothing.
  std::vector<std::pair<std::string_view, std::string_view>> items;
  for (uint64_t i = 1; i <= count; ++i) {
    uint64_t size = 0;
    std::string_view file, key, payload;
    if (!take(in, &size) || !take(in, size, &file)) {
      throw fail(fmt::format("entry {} of {} is truncated", i, count));
    }
    if (const std::string why = decode_entry(file, &key, &payload); !why.empty()) {
      throw fail(fmt::format("entry {} of {}: {}", i, count, why));
    }
    items.emplace_back(key, payload);
  }
  if (!in.empty()) throw fail("bytes after the last entry");
  for (const auto& [key, payload] : items) {
    if (!write_entry(key, payload)) throw fail(fmt::format("cannot write into '{}'", dir_));
  }
  evict("");
  return count;
}

bool DiskCache::enabled() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return !disabled_;
}

}  // namespace conv3djit::detail
