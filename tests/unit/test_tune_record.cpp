// Tuned records on the CPU: the key names everything that can change the winner, the payload
// round-trips and refuses what is not a whole record, records travel through the disk cache's
// listing and archives beside cubins, and the tuning switch refuses an unknown value.
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "catch.hpp"
#include "temp_dir.hpp"
#include "cache/disk_cache.hpp"
#include "config_cases.hpp"
#include "conv3djit/engine.hpp"
#include "tune/record.hpp"

using namespace conv3djit;
using namespace conv3djit::detail;

namespace {

using conv3djit::test::TempDir;

namespace fs = std::filesystem;

DeviceIdentity h200() {
  DeviceIdentity id;
  id.name = "NVIDIA H200";
  id.sm_count = 132;
  id.clock_mhz = 1980;
  id.memory_clock_mhz = 3201;
  id.driver_version = 13000;
  return id;
}

TunedRecord sample_record() {
  TunedRecord r;
  r.config = "igemm_sm80:bm=64,bn=64";
  r.kernel = "igemm_sm80 fp32 ncdhw class=tf32 epi=bias cg=64 k=3x3x3 s=1x1x1 d=1x1x1 bm=64 bn=64";
  r.median_ms = 0.123456;
  r.heuristic_ms = 0.2;
  r.candidates = 5;
  r.tuned_unix = 1796000000;
  return r;
}

}  // namespace

TEST_CASE("tuned record: the key names the description, the device and the library", "[tune]") {
  const Conv3dDesc desc = test::make(2, 64, {8, 16, 16}, 64, {3, 3, 3}, 1, 1);
  const std::string key = record_key_text(desc, h200());
  CHECK(is_record_key(key));
  CHECK(key.find(describe(desc)) != std::string::npos);
  CHECK(key.find("NVIDIA H200|sms=132|clock=1980|mem_clock=3201|driver=13000") != std::string::npos);
  CHECK(key.find(std::string("lib=") + version()) != std::string::npos);
  // Each of them changes the key.
  DeviceIdentity other = h200();
  other.sm_count = 114;
  CHECK(record_key_text(desc, other) != key);
  other = h200();
  other.clock_mhz = 1755;
  CHECK(record_key_text(desc, other) != key);
  other = h200();
  other.driver_version = 12080;
  CHECK(record_key_text(desc, other) != key);
  Conv3dDesc wider = desc;
  wider.w = 17;
  CHECK(record_key_text(wider, h200()) != key);
  Conv3dDesc tf32 = desc;
  tf32.precision = Precision::Tf32;
  CHECK(record_key_text(tf32, h200()) != key);
  CHECK_FALSE(is_record_key("igemm_sm80 fp32 ncdhw class=fp32|arch=sm_90"));
  CHECK(readable_record_key(key) == "tuned " + describe(desc) + " on NVIDIA H200 (132 SMs)");
}

TEST_CASE("tuned record: the payload round-trips and a partial one is refused", "[tune]") {
  const TunedRecord r = sample_record();
  const std::string payload = encode_record(r);
  const std::optional<TunedRecord> back = decode_record(payload);
  REQUIRE(back);
  CHECK(back->config == r.config);
  CHECK(back->kernel == r.kernel);
  CHECK(std::abs(back->median_ms - r.median_ms) < 1e-9);
  CHECK(std::abs(back->heuristic_ms - r.heuristic_ms) < 1e-9);
  CHECK(back->candidates == 5);
  CHECK(back->tuned_unix == r.tuned_unix);
  // Torn: every prefix that ends inside a line, or lacks a field, is no record.
  CHECK_FALSE(decode_record(payload.substr(0, payload.size() - 1)));
  CHECK_FALSE(decode_record(payload.substr(0, payload.find("median_ms"))));
  CHECK_FALSE(decode_record(""));
  CHECK_FALSE(decode_record("\x7f" "ELF\n"));
  std::string bad_number = payload;
  bad_number.replace(bad_number.find("0.123456"), 8, "0.12x456");
  CHECK_FALSE(decode_record(bad_number));
}

TEST_CASE("tuned record: listed, exported and imported with the cubins", "[tune]") {
  TempDir a, b;
  const Conv3dDesc desc = test::make(1, 16, {4, 8, 8}, 32, {3, 3, 3}, 1, 1);
  const std::string key = record_key_text(desc, h200());
  const std::string payload = encode_record(sample_record());
  {
    DiskCache cache(a.path.string(), 1ull << 30);
    REQUIRE(cache.store(key, payload).empty());
    REQUIRE(cache.store("some cubin|arch=sm_90", "name\ncubin").empty());
  }
  EngineOptions options;
  options.cache_dir = a.path.string();
  Engine engine(options);
  const std::vector<CacheEntry> entries = engine.cache_entries();
  REQUIRE(entries.size() == 2);
  const auto listed = std::find_if(entries.begin(), entries.end(), [&](const CacheEntry& e) { return e.key == key; });
  REQUIRE(listed != entries.end());
  CHECK(listed->kernel == readable_record_key(key));
  const std::string archive = (a.path / "cache.c3j").string();
  CHECK(engine.cache_export(archive) == 2);
  EngineOptions fresh = options;
  fresh.cache_dir = (b.path / "cache").string();
  Engine importer(fresh);
  CHECK(importer.cache_import(archive) == 2);
  DiskCache imported(fresh.cache_dir, 1ull << 30);
  const std::optional<std::string> loaded = imported.load(key);
  REQUIRE(loaded);
  CHECK(*loaded == payload);
}

TEST_CASE("tuning: CONV3DJIT_TUNE takes off or first_use, and refuses anything else", "[tune]") {
  ::setenv("CONV3DJIT_TUNE", "first_use", 1);
  EngineOptions memory_only;
  memory_only.disk_cache = false;
  CHECK_NOTHROW(Engine(memory_only));
  ::setenv("CONV3DJIT_TUNE", "always", 1);
  try {
    Engine engine(memory_only);
    FAIL("an unknown CONV3DJIT_TUNE was accepted");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::InvalidArgument);
    CHECK(std::string(e.what()).find("CONV3DJIT_TUNE = 'always': expected off or first_use") != std::string::npos);
  }
  // An explicit option wins over the variable.
  memory_only.tune_mode = TuneMode::Off;
  CHECK_NOTHROW(Engine(memory_only));
  ::unsetenv("CONV3DJIT_TUNE");
}

TEST_CASE("tuning: limits out of range are refused when the Engine is made", "[tune]") {
  EngineOptions options;
  options.disk_cache = false;
  const auto refused = [&](const char* expected) {
    try {
      Engine engine(options);
      FAIL("accepted: " << expected);
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::InvalidArgument);
      CHECK(std::string(e.what()).find(expected) != std::string::npos);
    }
  };
  options.tuning.max_candidates = 0;
  refused("tuning.max_candidates = 0: must be >= 1");
  options.tuning = TuneOptions{};
  options.tuning.budget_ms = 0;
  refused("tuning.budget_ms = 0: must be > 0");
  options.tuning.budget_ms = std::numeric_limits<double>::quiet_NaN();
  refused("tuning.budget_ms = nan: must be > 0");
  options.tuning = TuneOptions{};
  options.tuning.runs = 0;
  refused("tuning.runs = 0: must be >= 1");
  options.tuning = TuneOptions{};
  CHECK_NOTHROW(Engine(options));
}
