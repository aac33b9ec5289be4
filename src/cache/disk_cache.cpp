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
#include <thread>
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
constexpr std::string_view kLockSuffix = ".lock";  // beside the entry: the compile lock of its key
constexpr size_t kNameDigits = 32;
// A temp file this old belongs to a writer that died; a younger one may still be renamed.
constexpr int64_t kStaleTempNs = 3600ll * 1000000000ll;

fs::path entry_path(const std::string& dir, std::string_view key) {
  const std::string name = hash128_hex(key);
  return fs::path(dir) / name.substr(0, 2) / (name + std::string(kEntrySuffix));
}

// Deletes a bad entry (a damaged file, or a folder or FIFO at an entry's name), unless a writer
// has meanwhile renamed a good one over its name.
void discard(const std::string& path, int open_fd) {
  struct stat opened, named;
  if (::fstat(open_fd, &opened) == 0 && ::lstat(path.c_str(), &named) == 0 &&
      opened.st_dev == named.st_dev && opened.st_ino == named.st_ino) {
    std::error_code ec;
    fs::remove_all(path, ec);  // does not follow links
  }
}

// Creates the missing folders of dir, each 0700: no other user may add a cubin to them.
std::string make_folders(const fs::path& dir) {
  std::vector<fs::path> missing;
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) break;
    if (errno != ENOENT) return fmt::format("cannot create '{}': {}", dir.string(), errno_text());
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST) {
      return fmt::format("cannot create '{}': {}", it->string(), errno_text());
    }
  }
  return "";
}

// Why a folder whose cubins would run on the GPU is not safe to use: another user could write
// it, or could replace it through a folder above it. "" when it is safe, or does not exist yet.
std::string untrusted(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    // Not there yet (we create it 0700), or under a file (stores fail and say so): nothing to trust.
    return errno == ENOENT || errno == ENOTDIR ? "" : fmt::format("'{}': {}", dir, errno_text());
  }
  if (!S_ISDIR(st.st_mode)) return "";
  const auto others_write = [](const struct stat& s) { return (s.st_mode & (S_IWGRP | S_IWOTH)) != 0; };
  const auto foreign = [](const struct stat& s) { return s.st_uid != ::geteuid() && s.st_uid != 0; };
  if (foreign(st)) return fmt::format("'{}' belongs to another user (uid {})", dir, st.st_uid);
  if (others_write(st)) {
    return fmt::format("'{}' is writable by other users (mode {:04o})", dir, st.st_mode & 07777);
  }
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec) return fmt::format("'{}': {}", dir, ec.message());
  // A folder above that others can write (without the sticky bit, as /tmp has) lets them rename
  // the cache folder away and put their own in its place.
  for (fs::path p = real.parent_path(); ; p = p.parent_path()) {
    struct stat up {};
    if (::stat(p.c_str(), &up) != 0) return fmt::format("'{}': {}", p.string(), errno_text());
    if (foreign(up) || (others_write(up) && (up.st_mode & S_ISVTX) == 0)) {
      return fmt::format("'{}', a folder above it, can be changed by other users", p.string());
    }
    if (p == p.parent_path()) break;
  }
  return "";
}

// Whether files can be created in dir (or, while it does not exist, in the folder it would be
// created in); "" or why not. Tried for real: access() says yes to root on a read-only mount or /proc.
std::string probe_writable(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) return ec.message();
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0) {
    if (errno != ENOENT || p == p.parent_path()) return fmt::format("'{}': {}", p.string(), errno_text());
    p = p.parent_path();
  }
  if (!S_ISDIR(st.st_mode)) return fmt::format("'{}' is not a folder", p.string());
  const std::string probe = (p / fmt::format("{}probe-{}", kTempPrefix, ::getpid())).string() + "-XXXXXX";
  std::string name = probe;
  if (::mkdtemp(name.data()) == nullptr) {
    return fmt::format("cannot create files in '{}': {}", p.string(), errno_text());
  }
  ::rmdir(name.c_str());
  return "";
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

// The key text from an open entry's header, checked against the file's size, so that a large
// file of garbage is refused after a few bytes instead of read whole; the checksum is not checked.
std::optional<std::string> read_key(int fd, uint64_t file_size) {
  std::string head(kMagic.size() + 8, '\0');
  if (::pread(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    return std::nullopt;
  }
  std::string_view in = head, magic;
  uint32_t version = 0, key_size = 0;
  if (!take(in, kMagic.size(), &magic) || magic != kMagic || !take(in, &version) ||
      version != kFormatVersion || !take(in, &key_size) || key_size + 16ull > file_size - head.size()) {
    return std::nullopt;
  }
  std::string key(key_size + 8, '\0');  // the key, then the payload's size
  if (::pread(fd, key.data(), key.size(), static_cast<off_t>(head.size())) != static_cast<ssize_t>(key.size())) {
    return std::nullopt;
  }
  std::string_view size_bytes = std::string_view(key).substr(key_size);
  uint64_t payload_size = 0;
  take(size_bytes, &payload_size);
  if (payload_size != file_size - head.size() - key_size - 16) return std::nullopt;
  key.resize(key_size);
  return key;
}

// The open entry's file status, or why it is no entry (not a regular file).
std::string regular_file(int fd, struct stat* st) {
  if (::fstat(fd, st) != 0) return "cannot stat: " + errno_text();
  return S_ISREG(st->st_mode) ? "" : "not a regular file";
}

// Opens an entry for reading without following a link or blocking on a FIFO; -1 on a miss.
int open_entry(const std::string& path) {
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
}

}  // namespace

DiskCache::DiskCache(std::string dir, uint64_t limit_bytes, bool trust_shared)
    : dir_(dir.empty() ? default_dir() : std::move(dir)), limit_bytes_(limit_bytes), trust_shared_(trust_shared) {
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

std::string DiskCache::refusal() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!refusal_) {
    try {
      refusal_ = trust_shared_ ? "" : untrusted(dir_);
      if (!refusal_->empty()) {
        log().error("disk cache '{}' refused, kernels are kept in memory only: {}; its cubins would "
                    "run on the GPU. Make it private (chmod go-w) or trust it "
                    "(CONV3DJIT_TRUST_SHARED_CACHE=1, EngineOptions::trust_shared_cache)",
                    dir_, *refusal_);
      }
    } catch (...) {  // out of memory: refuse rather than trust unchecked
      return "cannot check the folder";
    }
  }
  return *refusal_;
}

std::optional<std::string> DiskCache::load(const std::string& key) noexcept {
  if (dir_.empty() || !refusal().empty()) return std::nullopt;
  try {
    const std::string path = entry_path(dir_, key).string();
    const Fd fd(open_entry(path));
    if (fd.fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;  // the usual miss
      log().warn("disk cache: dropping '{}': {}", path, errno == ELOOP ? "a symbolic link" : errno_text());
      if (errno == ELOOP) ::unlink(path.c_str());
      return std::nullopt;
    }
    struct stat st {};
    std::string why = regular_file(fd.fd, &st);
    std::string file;
    std::string_view file_key, payload;
    if (why.empty()) {
      const std::optional<std::string> header_key = read_key(fd.fd, static_cast<uint64_t>(st.st_size));
      if (!header_key) {
        // Only the header was read; decode_entry names what is wrong with a small file.
        why = st.st_size > (1 << 20) || !read_fd(fd.fd, &file) ? "bad header" : decode_entry(file, &file_key, &payload);
        if (why.empty()) why = "bad header";
      } else if (*header_key != key) {
        why = "it holds another key (hash collision or moved file)";
      } else if (!read_fd(fd.fd, &file)) {
        why = "cannot read: " + errno_text();
      } else {
        why = decode_entry(file, &file_key, &payload);
      }
    }
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

bool DiskCache::contains(const std::string& key) const noexcept {
  if (dir_.empty() || !refusal().empty()) return false;
  try {
    const Fd fd(open_entry(entry_path(dir_, key).string()));
    struct stat st {};
    if (fd.fd < 0 || !regular_file(fd.fd, &st).empty()) return false;
    const std::optional<std::string> header_key = read_key(fd.fd, static_cast<uint64_t>(st.st_size));
    return header_key && *header_key == key;
  } catch (...) {
    return false;
  }
}

std::string DiskCache::store(const std::string& key, const std::string& payload) noexcept {
  try {
    if (std::string why = refusal(); !why.empty()) return "refused: " + why;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!disabled_.empty()) return disabled_;
    }
    std::string why = write_entry(key, payload);
    if (why.empty()) {
      evict(key);
    } else {
      disable(why);
    }
    return why;
  } catch (...) {
    return "out of memory";
  }
}

std::string DiskCache::write_entry(std::string_view key, std::string_view payload) noexcept {
  try {
    const fs::path path = entry_path(dir_, key);
    if (std::string error = make_folders(path.parent_path()); !error.empty()) return error;
    // Something else at the entry's name (a folder, a FIFO, a link) is a bad entry: dropped.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      log().warn("disk cache: dropping '{}': not a regular file", path.string());
      std::error_code ec;
      fs::remove_all(path, ec);
    }
    return write_atomically(path, encode_entry(key, payload));
  } catch (const std::exception& e) {
    return e.what();
  }
}

DiskCache::KeyLock& DiskCache::KeyLock::operator=(KeyLock&& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(waited_, other.waited_);
  return *this;
}

DiskCache::KeyLock::~KeyLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

DiskCache::KeyLock DiskCache::lock(const std::string& key, std::chrono::milliseconds timeout) noexcept {
  KeyLock held;
  try {
    if (dir_.empty() || !refusal().empty() || !enabled()) return held;
    fs::path path = entry_path(dir_, key);
    if (!make_folders(path.parent_path()).empty()) return held;
    path.replace_extension(kLockSuffix);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    struct stat st {};
    if (fd < 0) return held;
    KeyLock candidate;
    candidate.fd_ = fd;
    if (!regular_file(fd, &st).empty()) return held;
    // flock has no timeout: poll, briefly, since a compile takes from 0.1 s to a few seconds.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) return held;
      candidate.waited_ = true;
      if (std::chrono::steady_clock::now() >= deadline) {
        log().warn("disk cache: waited {} s for another process to compile '{}'; compiling it here too",
                   std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), key);
        return held;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return candidate;
  } catch (...) {
    return held;
  }
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

void DiskCache::remove(const std::string& key) noexcept {
  if (dir_.empty()) return;
  try {
    ::unlink(entry_path(dir_, key).c_str());
  } catch (...) {  // out of memory: the entry stays until its next load checks it
  }
}

void DiskCache::require_folder(bool must_exist) const {
  if (dir_.empty()) throw Error(ErrorCategory::CacheIO, "no cache folder: set CONV3DJIT_CACHE_DIR or HOME");
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    if (errno != ENOENT || must_exist) {
      throw Error(ErrorCategory::CacheIO,
                  errno == ENOENT ? fmt::format("cache folder '{}' does not exist", dir_)
                                  : fmt::format("cache folder '{}': {}", dir_, errno_text()));
    }
  } else if (!S_ISDIR(st.st_mode)) {
    throw Error(ErrorCategory::CacheIO, fmt::format("cache folder '{}' is not a folder", dir_));
  }
  if (std::string why = refusal(); !why.empty()) {
    throw Error(ErrorCategory::CacheIO,
                fmt::format("cache folder refused: {} (trust it with CONV3DJIT_TRUST_SHARED_CACHE=1)", why));
  }
}

std::vector<CacheEntry> DiskCache::entries() const {
  require_folder(true);
  std::vector<CacheEntry> out;
  for (const FileStat& f : scan(dir_, false)) {
    const Fd fd(open_entry(f.path));
    if (fd.fd < 0) continue;  // removed meanwhile
    if (std::optional<std::string> key = read_key(fd.fd, f.bytes)) {
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
  info.limit_bytes = limit_bytes_;
  if (dir_.empty()) {
    info.problem = "no cache folder: set CONV3DJIT_CACHE_DIR or HOME";
    return info;
  }
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    if (errno != ENOENT) info.problem = fmt::format("'{}': {}", dir_, errno_text());
  } else if (!S_ISDIR(st.st_mode)) {
    info.problem = fmt::format("'{}' is not a folder", dir_);
  } else {
    info.exists = true;
  }
  if (info.problem.empty()) info.problem = refusal();
  if (info.problem.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    info.problem = disabled_;
  }
  if (info.problem.empty()) info.problem = probe_writable(dir_);
  info.writable = info.problem.empty();
  if (info.exists && refusal().empty()) {
    for (const FileStat& f : scan(dir_, false)) {
      info.bytes += f.bytes;
      ++info.entries;
    }
  }
  return info;
}

uint64_t DiskCache::clear() {
  require_folder(true);
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
  require_folder(true);
  std::string archive(kArchiveMagic);
  put<uint64_t>(archive, 0);  // the count, patched below
  uint64_t count = 0;
  for (const FileStat& f : scan(dir_, false)) {
    std::string file;
    std::string_view key, payload;
    const Fd fd(open_entry(f.path));
    struct stat st {};
    if (fd.fd < 0 || !regular_file(fd.fd, &st).empty() || !read_fd(fd.fd, &file)) continue;  // removed meanwhile
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
  if (const std::string error = write_output(path, archive); !error.empty()) {
    throw Error(ErrorCategory::CacheIO,
                fmt::format("cannot export the cache to '{}': {}", path, error));
  }
  return count;
}

uint64_t DiskCache::import_archive(const std::string& path) {
  const auto fail = [&](const std::string& what) {
    return Error(ErrorCategory::CacheIO, fmt::format("cannot import archive '{}': {}", path, what));
  };
  require_folder(false);
  std::string archive;
  if (!read_file(path, &archive)) throw fail(errno_text());
  std::string_view in = archive, magic, sum;
  uint64_t checksum = 0, count = 0;
  if (archive.empty()) throw fail("empty input");
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
  // A write that fails (a full disk) takes back the entries this import added, so the folder is
  // as it was, not holding an unnamed part of the archive.
  std::vector<std::string> added;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& [key, payload] = items[i];
    const std::string entry = entry_path(dir_, key).string();
    struct stat st {};
    const bool existed = ::lstat(entry.c_str(), &st) == 0;
    if (const std::string error = write_entry(key, payload); !error.empty()) {
      for (const std::string& p : added) ::unlink(p.c_str());
      throw fail(fmt::format("writing entry {} of {} into '{}' failed: {}; the {} entries this import "
                             "had added were removed again, the cache is as it was",
                             i + 1, items.size(), dir_, error, added.size()));
    }
    if (!existed) added.push_back(entry);
  }
  evict("");
  return count;
}

bool DiskCache::enabled() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return disabled_.empty() && (!refusal_ || refusal_->empty());
}

void DiskCache::disable(const std::string& reason) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!disabled_.empty()) return;
  try {
    disabled_ = reason.empty() ? "write failed" : reason;
    log().warn("disk cache '{}' disabled, kernels are kept in memory only: {}", dir_, reason);
  } catch (...) {  // no logger (out of memory): memory-only all the same
  }
}

}  // namespace conv3djit::detail
