#pragma once
// DiskCache: cubins on disk, keyed by the full key text, safe across processes.
// Guarantees: a load returns either a payload whose file passed every check (magic, format
// version, key text, size, checksum) or nothing; a bad file is logged, deleted and reported as a
// miss. store() never throws: a read-only or full folder turns the cache memory-only with one
// warning. Writes go to a temp file in the same folder, then rename(), so no reader sees a torn
// file; no lock is held across a compile.
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
  /// dir empty: default_dir(). The folder is created on first store.
  DiskCache(std::string dir, uint64_t limit_bytes);

  /// $CONV3DJIT_CACHE_DIR, else $XDG_CACHE_HOME/conv3djit, else ~/.cache/conv3djit.
  static std::string default_dir();

  std::optional<std::string> load(const std::string& key) noexcept;
  void store(const std::string& key, const std::string& payload) noexcept;
  /// Drops an entry whose payload the driver refused.
  void remove(const std::string& key) noexcept;

  std::vector<CacheEntry> entries() const;
  CacheInfo info() const;
  uint64_t clear();
  uint64_t export_archive(const std::string& path) const;
  uint64_t import_archive(const std::string& path);

  bool enabled() const noexcept;
  const std::string& dir() const noexcept { return dir_; }

 private:
  std::string dir_;
  uint64_t limit_bytes_;
  mutable std::mutex mutex_;
  bool disabled_ = false;  // set once after the first write failure

  /// Writes one entry atomically; false (and disabled) on failure.
  bool write_entry(std::string_view key, std::string_view payload) noexcept;
  /// Deletes least recently used entries beyond the limit; the one of `keep_key` goes last.
  void evict(std::string_view keep_key) const noexcept;
  /// Turns the cache memory-only, warning only the first time.
  void disable(const std::string& reason) noexcept;
};

}  // namespace conv3djit::detail
