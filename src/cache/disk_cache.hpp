#pragma once
// DiskCache: cubins on disk, keyed by the full key text, safe across processes.
// Guarantees: a load returns either a payload whose file passed every check (regular file, magic,
// format version, key text, size, checksum) or nothing; a bad entry (also a folder or FIFO at an
// entry's name) is logged, deleted and reported as a miss. store() never throws: it says whether
// the entry is on disk, and a folder that cannot be written turns the cache memory-only with one
// warning. Writes go to a temp file in the same folder, then rename(), so no reader sees a torn
// file. A cubin is code that runs on the GPU: folders are created 0700, and a folder that other
// users can write is refused unless the caller trusts it.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conv3djit/engine.hpp"

namespace conv3djit::detail {

class DiskCache {
 public:
  /// dir empty: default_dir(). The folder is created (0700) on first store. trust_shared: accept
  /// a folder that other users can write.
  DiskCache(std::string dir, uint64_t limit_bytes, bool trust_shared = false);

  /// $CONV3DJIT_CACHE_DIR, else $XDG_CACHE_HOME/conv3djit, else ~/.cache/conv3djit.
  static std::string default_dir();

  std::optional<std::string> load(const std::string& key) noexcept;
  /// "" once the entry is on disk, else why it is not.
  std::string store(const std::string& key, const std::string& payload) noexcept;
  /// Whether an entry for key is on disk (its header and size checked, not its checksum).
  bool contains(const std::string& key) const noexcept;
  /// Drops an entry whose payload the driver refused.
  void remove(const std::string& key) noexcept;

  /// An exclusive lock on one key, shared by every process using the folder: the one that holds
  /// it compiles, the others wait and then read the entry. An flock, so the kernel releases it when
  /// its holder dies, and nobody waits on a crashed compiler.
  class KeyLock {
   public:
    KeyLock() = default;
    KeyLock(KeyLock&& other) noexcept : fd_(other.fd_), waited_(other.waited_) { other.fd_ = -1; }
    KeyLock& operator=(KeyLock&& other) noexcept;
    ~KeyLock();
    bool held() const noexcept { return fd_ >= 0; }
    /// Another process held the lock first: the entry may be on disk now.
    bool waited() const noexcept { return waited_; }

   private:
    friend class DiskCache;
    int fd_ = -1;
    bool waited_ = false;
  };
  /// Waits up to `timeout` for the key's lock; an unheld lock when it cannot be had (no folder,
  /// the wait ran out: the caller then goes on without it).
  KeyLock lock(const std::string& key, std::chrono::milliseconds timeout) noexcept;

  // Explicit cache commands: they throw Error(CacheIO) on a folder they cannot use (missing, not
  // a folder, a symlink loop, refused as shared).
  std::vector<CacheEntry> entries() const;
  CacheInfo info() const;
  uint64_t clear();
  /// "-" writes to standard output.
  uint64_t export_archive(const std::string& path) const;
  /// "-" reads standard input. Every entry is checked before the first is written; if a write
  /// fails, the entries written so far are removed again and the error says so.
  uint64_t import_archive(const std::string& path);

  /// Whether stores may still succeed (false after a write failure or a refused folder).
  bool enabled() const noexcept;
  const std::string& dir() const noexcept { return dir_; }

 private:
  std::string dir_;
  uint64_t limit_bytes_;
  bool trust_shared_;
  mutable std::mutex mutex_;
  mutable std::optional<std::string> refusal_;  // why the folder is not trusted ("" = trusted), once known
  std::string disabled_;  // why stores stopped; set once, after the first write failure

  /// "" when the folder may be used for loads, else why not (checked once, then remembered).
  std::string refusal() const noexcept;
  /// For explicit commands: throws CacheIO unless the folder is usable (and exists, if must_exist).
  void require_folder(bool must_exist) const;
  /// Writes one entry atomically; "" or what failed.
  std::string write_entry(std::string_view key, std::string_view payload) noexcept;
  /// Deletes least recently used entries beyond the limit; the one of `keep_key` goes last.
  void evict(std::string_view keep_key) const noexcept;
  /// Turns the cache memory-only, warning only the first time.
  void disable(const std::string& reason) noexcept;
};

}  // namespace conv3djit::detail
