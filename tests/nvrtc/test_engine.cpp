// The Engine's deployment promises, with NVRTC and no GPU: precompile says what it wrote (every
// cache entry, helper kernels included) and fails when it could not store; CompileMode turns a
// miss into an error or a warning; arch names are checked against this NVRTC.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "catch.hpp"
#include "conv3djit/engine.hpp"
#include "warning_log.hpp"

using namespace conv3djit;
using conv3djit::test::WarningLog;

namespace {

// A fresh folder under the system's temp folder, removed afterwards.
struct TempCache {
  std::string dir;
  explicit TempCache(const char* name)
      : dir((std::filesystem::temp_directory_path() /
             (std::string("conv3djit-engine-") + name + "-" + std::to_string(::getpid())))
                .string()) {
    std::filesystem::remove_all(dir);
  }
  ~TempCache() { std::filesystem::remove_all(dir); }
  EngineOptions options(std::optional<CompileMode> mode = std::nullopt) const {
    EngineOptions o;
    o.cache_dir = dir;
    o.compile_mode = mode;
    return o;
  }
};

// Sets an environment variable for a scope, restoring what was there.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> saved;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* old = std::getenv(n)) saved = old;
    ::setenv(n, value, 1);
  }
  ~ScopedEnv() {
    if (saved) {
      ::setenv(name.c_str(), saved->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The Error f throws; nullopt if it returns.
template <class F>
std::optional<Error> error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// A small layer whose plan needs a helper: W = 13 rows are copied for the TMA boxes.
Conv3dDesc layer() {
  Conv3dDesc d;
  d.n = 1; d.c = 5; d.d = 6; d.h = 7; d.w = 13; d.k = 16; d.kernel = 3;
  return d;
}

}  // namespace

TEST_CASE("precompile reports every cache entry it wrote, helpers included, each on disk") {
  TempCache cache("entries");
  Engine engine(cache.options());
  const PrecompileResult r = engine.precompile(layer(), "sm_90");
  REQUIRE(r.kernels.size() == 2);
  CHECK(r.main().kernel == engine.kernel_for(layer(), "sm_90"));
  CHECK(r.kernels[1].kernel.rfind("pitch_rows ", 0) == 0);
  for (const PrecompiledKernel& k : r.kernels) {
    CHECK(k.compiled);
    CHECK(k.on_disk);
  }
  const std::vector<CacheEntry> entries = engine.cache_entries();
  REQUIRE(entries.size() == 2);
  for (const CacheEntry& e : entries) {
    CHECK((e.key == r.kernels[0].key || e.key == r.kernels[1].key));
    CHECK(contains(e.kernel, " sm_90"));
    CHECK_FALSE(contains(e.kernel, "|"));
  }
  // Kept in memory, gone from disk: the next precompile puts it back instead of saying "cached".
  engine.cache_clear();
  const PrecompileResult again = engine.precompile(layer(), "sm_90");
  CHECK_FALSE(again.main().compiled);
  CHECK(again.main().on_disk);
  CHECK(engine.cache_entries().size() == 2);
}

TEST_CASE("precompile fails, naming the folder and the reason, when the disk cache cannot store") {
  EngineOptions options;
  options.cache_dir = "/proc/conv3djit-precompile";  // no folder can be made there, even by root
  Engine engine(options);
  WarningLog quiet;
  const std::optional<Error> e = error_of([&] { engine.precompile(layer(), "sm_90"); });
  REQUIRE(e);  // not a success with nothing saved
  INFO(e->what());
  CHECK(e->category() == ErrorCategory::CacheIO);
  CHECK(contains(e->what(), "/proc/conv3djit-precompile"));
  CHECK(contains(e->what(), "not saved"));
  CHECK_FALSE(engine.cache_info().writable);
}

TEST_CASE("CompileMode::Never turns a miss into cache_miss, naming kernel and description, and counts it") {
  TempCache cache("never");
  Engine never(cache.options(CompileMode::Never));
  const std::optional<Error> e = error_of([&] { never.precompile(layer(), "sm_90"); });
  REQUIRE(e);  // not compiled
  INFO(e->what());
  CHECK(e->category() == ErrorCategory::CacheMiss);
  CHECK(contains(e->what(), never.kernel_for(layer(), "sm_90")));
  CHECK(contains(e->what(), describe(layer())));
  CHECK(contains(e->what(), cache.dir));
  CHECK(never.stats().refused_compiles == 1);
  CHECK(never.stats().compiles == 0);
  CHECK_FALSE(std::filesystem::exists(cache.dir));

  // Warmed by another Engine: served from disk, nothing compiled.
  Engine(cache.options()).precompile(layer(), "sm_90");
  const PrecompileResult r = never.precompile(layer(), "sm_90");
  CHECK_FALSE(r.main().compiled);
  CHECK(never.stats().compiles == 0);
  CHECK(never.stats().disk_hits == 2);
}

TEST_CASE("CompileMode::Warn compiles and logs each miss") {
  TempCache cache("warn");
  Engine warn(cache.options(CompileMode::Warn));
  WarningLog warnings;
  CHECK(warn.precompile(layer(), "sm_90").main().compiled);
  int misses = 0;
  for (const std::string& m : warnings.messages()) misses += contains(m, "not in the cache");
  CHECK(misses == 2);  // the convolution and its input copy
}

TEST_CASE("CONV3DJIT_COMPILE chooses the mode, in any case; an unknown value is an error") {
  TempCache cache("env");
  EngineOptions options = cache.options();
  {
    ScopedEnv env("CONV3DJIT_COMPILE", "NEVER");
    Engine engine(options);
    CHECK_THROWS_AS(engine.precompile(layer(), "sm_90"), Error);
    CHECK(engine.stats().refused_compiles == 1);
    options.compile_mode = CompileMode::Allow;  // the option wins over the environment
    CHECK(Engine(options).precompile(layer(), "sm_90").main().compiled);
    options.compile_mode.reset();
  }
  ScopedEnv env("CONV3DJIT_COMPILE", "nevr");
  const std::optional<Error> e = error_of([&] { Engine engine(options); });
  REQUIRE(e);  // a mistyped mode is not taken for allow
  CHECK(e->category() == ErrorCategory::InvalidArgument);
  CHECK(contains(e->what(), "CONV3DJIT_COMPILE = 'nevr': expected allow, warn or never"));
}

TEST_CASE("arch names are checked against this NVRTC before anything is compiled") {
  const std::vector<std::string> archs = supported_archs();
  REQUIRE_FALSE(archs.empty());
  CHECK(std::find(archs.begin(), archs.end(), "sm_90") != archs.end());
  CHECK_NOTHROW(check_arch("sm_90"));
  CHECK_NOTHROW(check_arch("sm_90a"));
  const struct {
    const char* arch;
    ErrorCategory category;
  } bad[] = {{"sm_70", ErrorCategory::Unsupported},          {"sm_95", ErrorCategory::Unsupported},
             {"sm_80a", ErrorCategory::Unsupported},         {"90", ErrorCategory::InvalidArgument},
             {"sm_99999999999", ErrorCategory::InvalidArgument}, {"compute_90", ErrorCategory::InvalidArgument},
             {"sm_", ErrorCategory::InvalidArgument},        {"sm_90x", ErrorCategory::InvalidArgument}};
  EngineOptions memory_only;
  memory_only.disk_cache = false;
  Engine engine(memory_only);
  for (const auto& [arch, category] : bad) {
    INFO(arch);
    const std::optional<Error> e = error_of([&] { engine.precompile(layer(), arch); });
    REQUIRE(e);
    INFO(e->what());
    CHECK(e->category() == category);
    CHECK(contains(e->what(), "sm_90,"));  // the message lists what is supported
  }
  CHECK(engine.stats().compiles == 0);
}
