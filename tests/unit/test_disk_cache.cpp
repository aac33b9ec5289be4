// DiskCache on real files: each test case gets a fresh folder from mkdtemp.
#include <fcntl.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "catch.hpp"
#include "temp_dir.hpp"
#include "conv3djit/error.hpp"
#include "cache/disk_cache.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "warning_log.hpp"

namespace {

using conv3djit::test::TempDir;

namespace fs = std::filesystem;
using conv3djit::ErrorCategory;
using conv3djit::detail::DiskCache;
using conv3djit::test::WarningLog;

constexpr uint64_t kNoLimit = 1ull << 40;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  REQUIRE(out.good());
}

// Bytes that differ with the seed and the position, NULs included, so a mixed-up file shows.
std::string make_payload(uint32_t seed, size_t size) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

fs::path path_of(const DiskCache& cache, const std::string& key) {
  for (const conv3djit::CacheEntry& e : cache.entries()) {
    if (e.key == key) return e.path;
  }
  FAIL("no entry for key " << key);
  return {};
}

std::set<std::string> keys_of(const DiskCache& cache) {
  std::set<std::string> keys;
  for (const conv3djit::CacheEntry& e : cache.entries()) keys.insert(e.key);
  return keys;
}

void set_mtime_ago(const fs::path& path, time_t seconds) {
  const timespec t{::time(nullptr) - seconds, 0};
  const timespec times[2] = {t, t};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::string le64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

// Recomputes a file's trailing checksum, so that only a deliberate change is wrong.
void fix_checksum(std::string& file) {
  file.replace(file.size() - 8, 8,
               le64(conv3djit::detail::fnv1a64(file.substr(0, file.size() - 8))));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count_temp_files(const fs::path& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    n += e.path().filename().string().rfind(".tmp-", 0) == 0;
  }
  return n;
}

}  // namespace

TEST_CASE("disk cache: store then load returns the payload", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  WarningLog warnings;
  const std::string key =
      "conv3d fp32 ndhwc arch=sm_90 nvrtc=13.0 src=abc opts=-O3 lib=0.1.0 fmt=1";
  const std::string payload = make_payload(1, 70000);

  CHECK_FALSE(cache.load(key));
  cache.store(key, payload);
  CHECK(cache.load(key) == payload);

  const std::string name = conv3djit::detail::hash128_hex(key);
  const fs::path expected_path = tmp.path / name.substr(0, 2) / (name + ".cubin");
  const auto entries = cache.entries();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].key == key);
  CHECK(entries[0].path == expected_path.string());
  CHECK(entries[0].bytes == fs::file_size(expected_path));
  CHECK(std::abs(entries[0].last_use_unix - static_cast<int64_t>(::time(nullptr))) < 60);

  cache.store(key, "replaced");
  CHECK(cache.load(key) == std::string("replaced"));
  cache.store(key, "");
  CHECK(cache.load(key) == std::string());
  cache.remove(key);
  CHECK_FALSE(cache.load(key));
  CHECK(warnings.messages().empty());
  CHECK(cache.enabled());
}

TEST_CASE("disk cache: different keys never share a file", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  for (uint32_t i = 0; i < 200; ++i) cache.store("key " + std::to_string(i), make_payload(i, 64));
  std::set<std::string> paths;
  for (const conv3djit::CacheEntry& e : cache.entries()) paths.insert(e.path);
  CHECK(paths.size() == 200);
  for (uint32_t i = 0; i < 200; ++i)
    CHECK(cache.load("key " + std::to_string(i)) == make_payload(i, 64));
}

TEST_CASE("disk cache: a damaged file is a miss, is deleted, and is rebuilt", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  const std::string key = "key A";
  const std::string payload = make_payload(2, 5000);
  cache.store(key, payload);
  fs::path path = path_of(cache, key);
  std::string file = read_bytes(path);
  const size_t payload_at = 8 + 4 + 4 + key.size() + 8;
  std::string load_key = key;
  std::string reason;

  SECTION("flipped payload byte") {
    file[payload_at + payload.size() / 2] ^= 0x01;
    write_bytes(path, file);
    reason = "checksum";
  }
  SECTION("truncated") {
    write_bytes(path, file.substr(0, file.size() - 1));
    reason = "truncated";
  }
  SECTION("bytes appended") {
    write_bytes(path, file + "x");
    reason = "trailing";
  }
  SECTION("zero length") {
    write_bytes(path, "");
    reason = "empty";
  }
  SECTION("garbage") {
    write_bytes(path, make_payload(3, 4096));
    reason = "magic";
  }
  SECTION("wrong format version") {
    file[8] = static_cast<char>(file[8] + 1);
    fix_checksum(file);
    write_bytes(path, file);
    reason = "format version";
  }
  SECTION("wrong key text") {
    load_key = "key B";
    cache.store(load_key, payload);
    const fs::path b_path = path_of(cache, load_key);
    fs::rename(path, b_path);
    path = b_path;
    reason = "another key";
  }

  WarningLog warnings;
  CHECK_FALSE(cache.load(load_key));
  CHECK_FALSE(fs::exists(path));
  const auto messages = warnings.messages();
  REQUIRE(messages.size() == 1);
  INFO(messages[0]);
  CHECK(contains(messages[0], reason));
  CHECK(contains(messages[0], path.string()));

  cache.store(load_key, payload);
  CHECK(cache.load(load_key) == payload);
  CHECK(cache.enabled());
}

TEST_CASE("disk cache: an unwritable folder turns the cache memory-only with one warning",
          "[disk_cache]") {
  TempDir tmp;
  fs::path dir;
  SECTION("folder path under a regular file") {
    write_bytes(tmp.path / "file", "x");
    dir = tmp.path / "file" / "cache";
  }
  SECTION("read-only folder") {
    if (::geteuid() == 0) {
      WARN("running as root, where chmod 0555 does not stop writes: read-only case skipped");
      return;
    }
    // A pre-filled read-only folder still serves loads.
    dir = tmp.path / "ro";
    DiskCache(dir.string(), kNoLimit).store("filled", "payload");
    const fs::path sub = path_of(DiskCache(dir.string(), kNoLimit), "filled").parent_path();
    fs::permissions(sub, fs::perms::owner_read | fs::perms::owner_exec);
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK(DiskCache(dir.string(), kNoLimit).load("filled") == std::string("payload"));
  }

  {
    WarningLog warnings;
    DiskCache cache(dir.string(), kNoLimit);
    CHECK_FALSE(cache.info().writable);
    CHECK(cache.enabled());
    CHECK_NOTHROW(cache.store("a", "payload"));
    CHECK_FALSE(cache.enabled());
    cache.store("b", "payload");
    cache.store("c", "payload");
    CHECK(warnings.messages().size() == 1);
    CHECK_NOTHROW(cache.load("a"));
    CHECK_FALSE(cache.load("a"));
    CHECK_FALSE(cache.info().writable);
  }
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(tmp.path, ec)) {
    fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
  }
}

TEST_CASE("disk cache: a write failing midway, as on a full disk, disables and leaves no file",
          "[disk_cache]") {
  TempDir tmp;
  const pid_t pid = ::fork();  // the child lowers its own file size limit
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Past RLIMIT_FSIZE write() fails with EFBIG, much as with ENOSPC, and no privilege is needed.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    int errors = ::setrlimit(RLIMIT_FSIZE, &limit) != 0;
    {
      WarningLog warnings;
      DiskCache cache(tmp.path.string(), kNoLimit);
      cache.store("small", "fits");
      cache.store("big", make_payload(1, 100000));
      cache.store("small again", "fits");
      errors += cache.load("small") != std::string("fits");
      errors += cache.load("big").has_value() + cache.load("small again").has_value();
      errors += cache.enabled() + (warnings.messages().size() != 1);
    }
    ::_exit(errors);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(count_temp_files(tmp.path) == 0);
}

TEST_CASE("disk cache: beyond the limit the least recently used entries go first", "[disk_cache]") {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  DiskCache unlimited(dir, kNoLimit);
  const std::string payload = make_payload(4, 1000);
  for (const char* key : {"entry a", "entry b", "entry c"}) unlimited.store(key, payload);
  set_mtime_ago(path_of(unlimited, "entry a"), 300);
  set_mtime_ago(path_of(unlimited, "entry b"), 200);
  set_mtime_ago(path_of(unlimited, "entry c"), 100);
  const uint64_t size = fs::file_size(path_of(unlimited, "entry a"));

  REQUIRE(unlimited.load("entry a") == payload);  // a load makes "entry a" the most recent
  const int64_t now = ::time(nullptr);
  CHECK(std::abs(unlimited.entries()[0].last_use_unix - now) < 60);
  DiskCache limited(dir, 2 * size + size / 2);
  limited.store("entry d", payload);
  CHECK(keys_of(limited) == std::set<std::string>{"entry a", "entry d"});

  // Entries stamped in the future (clock skew) still do not push out the entry just written.
  set_mtime_ago(path_of(limited, "entry a"), -3600);
  set_mtime_ago(path_of(limited, "entry d"), -3600);
  limited.store("entry f", payload);
  CHECK(limited.entries().size() == 2);
  CHECK(keys_of(limited).count("entry f") == 1);

  // An entry bigger than the whole limit is evicted too, after all the others.
  DiskCache tiny(dir, size - 1);
  tiny.store("entry e", payload);
  CHECK(tiny.entries().empty());
  CHECK(tiny.enabled());
}

TEST_CASE("disk cache: threads of one process share one cache object", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  WarningLog warnings;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (uint32_t t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (uint32_t i = 0; i < 20; ++i) {
        const std::string key = "threaded " + std::to_string(i);
        cache.store(key, make_payload(i, 1000 * i));
        if (cache.load(key) != make_payload(i, 1000 * i)) ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(errors == 0);
  CHECK(warnings.messages().empty());
  CHECK(cache.entries().size() == 20);
  CHECK(count_temp_files(tmp.path) == 0);
}

namespace {

constexpr int kProcesses = 8;
constexpr uint32_t kSharedKeys = 20;

std::string shared_key(uint32_t i) { return "shared key " + std::to_string(i); }
// 0 to ~300 kB
std::string shared_payload(uint32_t i) { return make_payload(i, (i * 40503u) % 300000u); }

// Forks kProcesses children that store and load every shared key in their own order; a hit with
// the wrong bytes, a miss right after one's own store (unless eviction may run), or any warning
// (a damaged file was found) makes a child exit non-zero.
void run_processes(const std::string& dir, uint64_t limit, bool evicting) {
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int errors = 0;
      {
        WarningLog warnings;
        DiskCache cache(dir, limit);
        std::vector<uint32_t> order(kSharedKeys);
        for (uint32_t i = 0; i < kSharedKeys; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<uint32_t>(p)));
        for (int round = 0; round < 2; ++round) {
          for (uint32_t i : order) {
            const std::optional<std::string> before = cache.load(shared_key(i));
            errors += before && *before != shared_payload(i);
            cache.store(shared_key(i), shared_payload(i));
            const std::optional<std::string> after = cache.load(shared_key(i));
            errors += after ? *after != shared_payload(i) : !evicting;
          }
        }
        errors += !cache.enabled();
        errors += static_cast<int>(warnings.messages().size());
      }
      ::_exit(errors == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

}  // namespace

TEST_CASE("disk cache: 8 processes warming one folder at once see no torn file", "[disk_cache]") {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  run_processes(dir, kNoLimit, false);

  WarningLog warnings;
  DiskCache cache(dir, kNoLimit);
  for (uint32_t i = 0; i < kSharedKeys; ++i) CHECK(cache.load(shared_key(i)) == shared_payload(i));
  CHECK(cache.entries().size() == kSharedKeys);
  CHECK(count_temp_files(tmp.path) == 0);
  CHECK(warnings.messages().empty());
}

TEST_CASE("disk cache: 8 processes evicting from one folder at once see no torn file",
          "[disk_cache]") {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  uint64_t total = 0;
  for (uint32_t i = 0; i < kSharedKeys; ++i) total += shared_payload(i).size();
  const uint64_t limit = total / 3;
  run_processes(dir, limit, true);

  WarningLog warnings;
  DiskCache cache(dir, limit);
  for (uint32_t i = 0; i < kSharedKeys; ++i) {
    const std::optional<std::string> got = cache.load(shared_key(i));
    CHECK((!got || *got == shared_payload(i)));
  }
  CHECK(warnings.messages().empty());
  // Racing evictors may leave the folder a little over; one more store trims it.
  cache.store(shared_key(1), shared_payload(1));
  CHECK(cache.info().bytes <= limit);
}

TEST_CASE("disk cache: export, clear and import restore every valid entry", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache((tmp.path / "cache").string(), kNoLimit);
  for (uint32_t i = 0; i < 5; ++i)
    cache.store("export " + std::to_string(i), make_payload(i, 3000 * i));
  cache.store("damaged", "payload");
  write_bytes(path_of(cache, "damaged"), "garbage");
  const std::string archive = (tmp.path / "cache.c3jarch").string();

  WarningLog warnings;
  CHECK(cache.export_archive(archive) == 5);
  CHECK(warnings.messages().size() == 1);  // the damaged entry, left out
  CHECK(count_temp_files(tmp.path) == 0);
  CHECK(cache.clear() == 6);
  CHECK(cache.entries().empty());
  CHECK(cache.import_archive(archive) == 5);
  for (uint32_t i = 0; i < 5; ++i) {
    CHECK(cache.load("export " + std::to_string(i)) == make_payload(i, 3000 * i));
  }
  CHECK(cache.entries().size() == 5);

  DiskCache other((tmp.path / "other").string(), kNoLimit);
  CHECK(other.import_archive(archive) == 5);
  CHECK(keys_of(other) == keys_of(cache));
}

TEST_CASE("disk cache: a corrupt archive throws CacheIO and imports nothing", "[disk_cache]") {
  TempDir tmp;
  DiskCache source((tmp.path / "source").string(), kNoLimit);
  for (uint32_t i = 0; i < 3; ++i)
    source.store("archived " + std::to_string(i), make_payload(i, 2000));
  const std::string archive = (tmp.path / "cache.c3jarch").string();
  REQUIRE(source.export_archive(archive) == 3);
  std::string bytes = read_bytes(archive);
  std::string what;

  SECTION("flipped byte") {
    bytes[bytes.size() / 2] ^= 0x10;
    what = "checksum";
  }
  SECTION("truncated") {
    bytes.resize(bytes.size() - 100);
    what = "checksum";
  }
  SECTION("not an archive") {
    bytes = make_payload(5, 100);
    what = "magic";
  }
  SECTION("an entry fails its own check under a valid archive checksum") {
    bytes[bytes.size() - 20] ^= 0x10;  // inside the last entry's payload
    fix_checksum(bytes);
    what = "entry 3 of 3";
  }
  SECTION("missing file") {
    fs::remove(archive);
    what = "No such file";
  }
  if (fs::exists(archive)) write_bytes(archive, bytes);

  DiskCache target((tmp.path / "target").string(), kNoLimit);
  try {
    target.import_archive(archive);
    FAIL("a corrupt archive was accepted");
  } catch (const conv3djit::Error& e) {
    INFO(e.what());
    CHECK(e.category() == ErrorCategory::CacheIO);
    CHECK(contains(e.what(), archive));
    CHECK(contains(e.what(), what));
  }
  CHECK_FALSE(fs::exists(tmp.path / "target"));  // not even the folder was made
}

TEST_CASE("disk cache: clear removes every entry and abandoned temp files", "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  for (const char* key : {"one", "two", "three"}) cache.store(key, "payload");
  const fs::path folder = path_of(cache, "one").parent_path();
  write_bytes(folder / ".tmp-1-1-1", "abandoned by a killed writer");
  set_mtime_ago(folder / ".tmp-1-1-1", 2 * 3600);
  write_bytes(folder / ".tmp-2-2-2", "still being written");
  CHECK(cache.entries().size() == 3);

  CHECK(cache.clear() == 3);
  CHECK(cache.entries().empty());
  CHECK_FALSE(fs::exists(folder / ".tmp-1-1-1"));
  CHECK(fs::exists(folder / ".tmp-2-2-2"));
  CHECK(cache.clear() == 0);
  cache.store("one", "again");
  CHECK(cache.load("one") == std::string("again"));
}

TEST_CASE("disk cache: info reports folder, writability, size, count and limit", "[disk_cache]") {
  TempDir tmp;
  const std::string dir = (tmp.path / "not" / "yet").string();
  DiskCache cache(dir, 123456);
  conv3djit::CacheInfo info = cache.info();
  CHECK(info.dir == dir);
  CHECK(info.writable);
  CHECK(info.bytes == 0);
  CHECK(info.entries == 0);
  CHECK(info.limit_bytes == 123456);

  cache.store("x", make_payload(1, 100));
  cache.store("y", make_payload(2, 200));
  info = cache.info();
  CHECK(info.entries == 2);
  CHECK(info.bytes == fs::file_size(path_of(cache, "x")) + fs::file_size(path_of(cache, "y")));
}

TEST_CASE("disk cache: default folder follows CONV3DJIT_CACHE_DIR, XDG_CACHE_HOME, HOME",
          "[disk_cache]") {
  struct SavedEnv {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    SavedEnv() {
      for (const char* name : {"CONV3DJIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
        const char* value = std::getenv(name);
        saved.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      }
    }
    ~SavedEnv() {
      for (const auto& [name, value] : saved) {
        if (value)
          ::setenv(name.c_str(), value->c_str(), 1);
        else
          ::unsetenv(name.c_str());
      }
    }
  } saved_env;

  ::setenv("CONV3DJIT_CACHE_DIR", "/srv/kernels", 1);
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/someone", 1);
  CHECK(DiskCache::default_dir() == "/srv/kernels");
  CHECK(DiskCache("", 1).dir() == "/srv/kernels");
  ::setenv("CONV3DJIT_CACHE_DIR", "", 1);
  CHECK(DiskCache::default_dir() == "/xdg/conv3djit");
  ::unsetenv("CONV3DJIT_CACHE_DIR");
  CHECK(DiskCache::default_dir() == "/xdg/conv3djit");
  ::setenv("XDG_CACHE_HOME", "relative/xdg", 1);  // the XDG spec says to ignore it
  CHECK(DiskCache::default_dir() == "/home/someone/.cache/conv3djit");
  ::unsetenv("XDG_CACHE_HOME");
  CHECK(DiskCache::default_dir() == "/home/someone/.cache/conv3djit");
  ::unsetenv("HOME");
  const passwd* pw = ::getpwuid(::getuid());
  REQUIRE(pw != nullptr);
  CHECK(DiskCache::default_dir() == (fs::path(pw->pw_dir) / ".cache" / "conv3djit").string());
}

// The cache as a fault and attack surface: what sits at an entry's name, who may write the folder,
// where archives come from and go to.

namespace {
// The path an entry for key has, with nothing there now.
fs::path vacated_entry(DiskCache& cache, const std::string& key) {
  cache.store(key, "payload");
  const fs::path path = path_of(cache, key);
  fs::remove(path);
  return path;
}
}  // namespace

TEST_CASE("disk cache: a FIFO, a folder or a link at an entry's name is dropped, and the cache goes on",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  const fs::path path = vacated_entry(cache, "victim");
  std::string what;
  SECTION("FIFO") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);  // a blocking open() would wait for a writer forever
    what = "not a regular file";
  }
  SECTION("folder") {
    fs::create_directories(path / "inside");
    what = "not a regular file";
  }
  SECTION("link") {
    write_bytes(tmp.path / "elsewhere", "x");
    fs::create_symlink(tmp.path / "elsewhere", path);
    what = "symbolic link";
  }
  WarningLog warnings;
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(cache.load("victim"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  REQUIRE(warnings.messages().size() == 1);
  CHECK(contains(warnings.messages()[0], what));
  CHECK_FALSE(fs::exists(fs::symlink_status(path)));
  CHECK(cache.store("victim", "again").empty());
  CHECK(cache.load("victim") == std::string("again"));
  CHECK(cache.enabled());
}

TEST_CASE("disk cache: a folder put at an entry's name before a store is dropped, not a reason to stop",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  fs::create_directories(vacated_entry(cache, "first"));
  WarningLog warnings;
  CHECK(cache.store("first", "payload").empty());
  CHECK(cache.enabled());
  CHECK(cache.load("first") == std::string("payload"));
  cache.store("second", "payload");
  CHECK(cache.load("second") == std::string("payload"));
}

TEST_CASE("disk cache: a dead writer's temp file under this process's name does not block stores",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  cache.store("probe", "payload");
  const fs::path folder = path_of(cache, "probe").parent_path();
  // Names a crashed process with this pid would have left: pid, thread hash, a counter.
  const size_t thread_hash = std::hash<std::thread::id>{}(std::this_thread::get_id());
  for (int i = 0; i < 64; ++i) {
    write_bytes(folder / fmt::format(".tmp-{}-{:x}-{}", ::getpid(), thread_hash, i), "leftover");
    write_bytes(folder / fmt::format(".tmp-{}-{:016x}", ::getpid(), i), "leftover");
  }
  WarningLog warnings;
  CHECK(cache.store("probe", "replaced").empty());
  CHECK(cache.enabled());
  CHECK(warnings.messages().empty());
}

TEST_CASE("disk cache: a huge file at an entry's name is refused by its header, not read whole",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), kNoLimit);
  cache.store("big", "payload");
  const fs::path path = path_of(cache, "big");
  const std::string file = read_bytes(path);
  // A sparse 1 GiB file: a valid header whose sizes do not add up to the file's.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  fs::resize_file(path, 1ull << 30);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    int errors = 0;
    {
      WarningLog warnings;
      errors += cache.load("big").has_value();
      errors += warnings.messages().size() != 1;
    }
    ::getrusage(RUSAGE_SELF, &after);
    errors += after.ru_maxrss - before.ru_maxrss > 64 * 1024;  // KiB: far below the file's 1 GiB
    ::_exit(errors);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("disk cache: folders are made 0700 and a folder others can write is refused unless trusted",
          "[disk_cache]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "new" / "cache";
  DiskCache cache(dir.string(), kNoLimit);
  REQUIRE(cache.store("key", "payload").empty());
  const auto mode = [](const fs::path& p) { return fs::status(p).permissions() & fs::perms::all; };
  CHECK(mode(tmp.path / "new") == fs::perms::owner_all);
  CHECK(mode(dir) == fs::perms::owner_all);
  CHECK(mode(path_of(cache, "key").parent_path()) == fs::perms::owner_all);

  fs::permissions(dir, fs::perms::all);  // 0777: anyone could plant a cubin
  WarningLog warnings;
  DiskCache shared(dir.string(), kNoLimit);
  CHECK_FALSE(shared.load("key"));
  CHECK(contains(shared.store("other", "payload"), "writable by other users"));
  CHECK_FALSE(shared.enabled());
  REQUIRE(warnings.messages().size() == 1);  // said once, at error level
  CHECK(contains(warnings.messages()[0], "CONV3DJIT_TRUST_SHARED_CACHE"));
  try {
    shared.entries();
    FAIL("a shared folder was listed");
  } catch (const conv3djit::Error& e) {
    CHECK(e.category() == ErrorCategory::CacheIO);
    CHECK(contains(e.what(), "writable by other users"));
  }
  CHECK_FALSE(shared.info().writable);
  CHECK(contains(shared.info().problem, "writable by other users"));

  DiskCache trusted(dir.string(), kNoLimit, true);
  CHECK(trusted.load("key") == std::string("payload"));
  CHECK(trusted.store("other", "payload").empty());

  // A folder above it that others can change (without the sticky bit) is as bad.
  fs::permissions(dir, fs::perms::owner_all);
  fs::permissions(tmp.path / "new", fs::perms::all);
  CHECK(contains(DiskCache(dir.string(), kNoLimit).store("x", "y"), "a folder above it"));
  fs::permissions(tmp.path / "new", fs::perms::owner_all | fs::perms::sticky_bit | fs::perms::others_all |
                                        fs::perms::group_all);
  CHECK(DiskCache(dir.string(), kNoLimit).store("x", "y").empty());
}

TEST_CASE("disk cache: cache commands on a folder they cannot use fail naming it", "[disk_cache]") {
  TempDir tmp;
  fs::path dir;
  std::string what;
  SECTION("missing") {
    dir = tmp.path / "missing";
    what = "does not exist";
  }
  SECTION("a file") {
    dir = tmp.path / "file";
    write_bytes(dir, "x");
    what = "is not a folder";
  }
  SECTION("a symlink loop") {
    dir = tmp.path / "loop";
    fs::create_symlink(tmp.path / "loop", dir);
    what = "symbolic links";
  }
  DiskCache cache(dir.string(), kNoLimit);
  for (int command = 0; command < 3; ++command) {
    try {
      if (command == 0) cache.entries();
      if (command == 1) cache.clear();
      if (command == 2) cache.export_archive((tmp.path / "out.c3j").string());
      FAIL("command " << command << " did not throw");
    } catch (const conv3djit::Error& e) {
      INFO(e.what());
      CHECK(e.category() == ErrorCategory::CacheIO);
      CHECK(contains(e.what(), dir.string()));
      CHECK(contains(e.what(), what));
    }
  }
  CHECK_FALSE(fs::exists(tmp.path / "out.c3j"));
  const conv3djit::CacheInfo info = cache.info();
  CHECK_FALSE(info.exists);
  if (what != "does not exist") {
    CHECK_FALSE(info.writable);
    CHECK(contains(info.problem, dir.string()));
  }
}

TEST_CASE("disk cache: info says a folder that cannot be made is not writable", "[disk_cache]") {
  DiskCache cache("/proc/conv3djit-cache", kNoLimit);  // /proc takes no new folders, even from root
  const conv3djit::CacheInfo info = cache.info();
  CHECK_FALSE(info.writable);
  CHECK_FALSE(info.problem.empty());
  WarningLog warnings;
  const std::string why = cache.store("key", "payload");
  INFO(why);
  CHECK(contains(why, "/proc/conv3djit-cache"));
  CHECK_FALSE(cache.enabled());
  CHECK(cache.store("again", "payload") == why);  // every later store says why, too
}

TEST_CASE("disk cache: export through a link replaces its target and keeps the link; - and pipes work",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache cache((tmp.path / "cache").string(), kNoLimit);
  cache.store("one", "payload one");
  cache.store("two", "payload two");
  const fs::path target = tmp.path / "real.c3j", link = tmp.path / "link.c3j";
  write_bytes(target, "old");
  fs::create_symlink(target, link);
  CHECK(cache.export_archive(link.string()) == 2);
  CHECK(fs::is_symlink(link));
  CHECK(read_bytes(target).rfind("C3JARCH1", 0) == 0);

  // Through a FIFO, as `conv3djit export /dev/stdout | ssh host conv3djit import -` does.
  const fs::path fifo = tmp.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::thread writer([&] { cache.export_archive(fifo.string()); });
  DiskCache other((tmp.path / "other").string(), kNoLimit);
  CHECK(other.import_archive(fifo.string()) == 2);
  writer.join();
  CHECK(other.load("two") == std::string("payload two"));
}

TEST_CASE("disk cache: an import that runs out of space takes back what it wrote and says so",
          "[disk_cache]") {
  TempDir tmp;
  DiskCache source((tmp.path / "source").string(), kNoLimit);
  // RLIMIT_FSIZE bounds each file: one entry too big for it, and the others written around it.
  for (uint32_t i = 0; i < 6; ++i) source.store("entry " + std::to_string(i), make_payload(i, i == 3 ? 100000 : 3000));
  const std::string archive = (tmp.path / "archive.c3j").string();
  REQUIRE(source.export_archive(archive) == 6);
  const fs::path target = tmp.path / "target";
  DiskCache(target.string(), kNoLimit).store("already there", "payload");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Past RLIMIT_FSIZE write() fails with EFBIG, as with ENOSPC: here on "entry 3".
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{16384, 16384};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int errors = 0;
    try {
      DiskCache(target.string(), kNoLimit).import_archive(archive);
      errors = 100;
    } catch (const conv3djit::Error& e) {
      errors += !contains(e.what(), "removed again");
    }
    ::_exit(errors);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  DiskCache after(target.string(), kNoLimit);
  CHECK(keys_of(after) == std::set<std::string>{"already there"});
  CHECK(count_temp_files(target) == 0);
}

TEST_CASE("disk cache: one process at a time holds a key's lock, and a holder's death frees it",
          "[disk_cache]") {
  TempDir tmp;
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Holds the lock, says so, and dies holding it, as a crashed compiler would.
    DiskCache child(tmp.path.string(), kNoLimit);
    const DiskCache::KeyLock held = child.lock("key", std::chrono::seconds(1));
    const bool ok = held.held() && ::write(pipe_fds[1], "x", 1) == 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::_exit(ok ? 0 : 1);
  }
  char c = 0;
  REQUIRE(::read(pipe_fds[0], &c, 1) == 1);
  DiskCache cache(tmp.path.string(), kNoLimit);
  {
    WarningLog warnings;
    const DiskCache::KeyLock short_wait = cache.lock("key", std::chrono::milliseconds(50));
    CHECK_FALSE(short_wait.held());
    REQUIRE(warnings.messages().size() == 1);
    CHECK(contains(warnings.messages()[0], "compiling it here too"));
  }
  CHECK(cache.lock("other key", std::chrono::milliseconds(50)).held());
  const auto start = std::chrono::steady_clock::now();
  const DiskCache::KeyLock later = cache.lock("key", std::chrono::seconds(20));
  CHECK(later.held());
  CHECK(later.waited());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}
