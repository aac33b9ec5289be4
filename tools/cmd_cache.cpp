// The cache commands: list, info, clear, export, import. None needs a GPU, so a deployment can
// inspect and ship a warmed cache from any machine.
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace conv3djit::cli {
namespace {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

std::string local_time(int64_t unix_seconds) {
  std::tm tm{};
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  localtime_r(&t, &tm);
  return fmt::format("{:%Y-%m-%d %H:%M:%S}", tm);
}

int run_list(const GlobalOptions& global, bool json) {
  Engine engine(global.engine_options());
  const std::vector<CacheEntry> entries = engine.cache_entries();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const CacheEntry& e : entries) {
      out.push_back({{"kernel", e.kernel}, {"key", e.key}, {"path", e.path}, {"bytes", e.bytes},
                     {"last_use_unix", e.last_use_unix}});
    }
    fmt::print("{}\n", nlohmann::json{{"dir", engine.cache_info().dir}, {"entries", out}}.dump());
    return kExitOk;
  }
  // The readable kernel and shape first; the full key (what the cache compares) under it.
  fmt::print("{:>10}  {:<19}  {}\n", "SIZE", "LAST USE", "KERNEL / KEY");
  for (const CacheEntry& e : entries) {
    fmt::print("{:>10}  {:<19}  {}\n{:>10}  {:<19}  {}\n", human_bytes(e.bytes), local_time(e.last_use_unix),
               e.kernel, "", "", e.key);
  }
  fmt::print("{} entries\n", entries.size());
  return kExitOk;
}

int run_info(const GlobalOptions& global, bool json) {
  Engine engine(global.engine_options());
  const CacheInfo cache = engine.cache_info();
  const std::optional<DeviceInfo> device = current_device();
  if (json) {
    nlohmann::json out = {{"version", version()},
                          {"nvrtc_version", nvrtc_version()},
                          {"cache", {{"dir", cache.dir},
                                     {"exists", cache.exists},
                                     {"writable", cache.writable},
                                     {"problem", cache.problem},
                                     {"bytes", cache.bytes},
                                     {"entries", cache.entries},
                                     {"limit_bytes", cache.limit_bytes}}},
                          {"device", nullptr}};
    if (device) {
      out["device"] = {{"ordinal", device->ordinal}, {"name", device->name}, {"arch", device->arch},
                       {"sm_count", device->sm_count}, {"driver_version", device->driver_version}};
    }
    fmt::print("{}\n", out.dump());
    return kExitOk;
  }
  fmt::print("conv3djit     {}\n", version());
  fmt::print("NVRTC         {}\n", nvrtc_version());
  fmt::print("cache dir     {}{}\n", cache.dir, cache.exists ? "" : " (not created yet)");
  fmt::print("cache state   {}\n", cache.writable ? "writable" : "cannot store kernels: " + cache.problem);
  fmt::print("cache size    {} in {} entries (limit {})\n", human_bytes(cache.bytes), cache.entries,
             human_bytes(cache.limit_bytes));
  if (device) {
    fmt::print("driver        {}.{}\n", device->driver_version / 1000, device->driver_version % 1000 / 10);
    fmt::print("device        {}: {} ({}, {} SMs)\n", device->ordinal, device->name, device->arch,
               device->sm_count);
  } else {
    fmt::print("device        none (no CUDA driver or device)\n");
  }
  return kExitOk;
}

int run_clear(const GlobalOptions& global) {
  Engine engine(global.engine_options());
  const uint64_t removed = engine.cache_clear();
  fmt::print("removed {} entries from {}\n", removed, engine.cache_info().dir);
  return kExitOk;
}

int run_export(const GlobalOptions& global, const std::string& archive) {
  Engine engine(global.engine_options());
  const uint64_t count = engine.cache_export(archive);
  // When the archive itself went to stdout ("-", /dev/stdout, /proc/self/fd/1), the report goes to stderr.
  struct stat out {}, target {};
  const bool to_stdout = archive == "-" || (::fstat(STDOUT_FILENO, &out) == 0 && ::stat(archive.c_str(), &target) == 0 &&
                                            out.st_dev == target.st_dev && out.st_ino == target.st_ino);
  fmt::print(to_stdout ? stderr : stdout, "exported {} entries to {}\n", count,
             archive == "-" ? "standard output" : archive);
  return kExitOk;
}

int run_import(const GlobalOptions& global, const std::string& archive) {
  Engine engine(global.engine_options());
  const uint64_t count = engine.cache_import(archive);
  fmt::print("imported {} entries into {}\n", count, engine.cache_info().dir);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_cache_commands(CLI::App& app, const GlobalOptions& global) {
  // Flags and paths live as long as the commands, which live as long as `app`.
  auto list_json = std::make_shared<bool>(false);
  auto info_json = std::make_shared<bool>(false);
  auto archive = std::make_shared<std::string>();

  CLI::App* list = app.add_subcommand("list", "list the disk cache entries");
  list->add_flag("--json", *list_json, "print one JSON object on stdout");
  CLI::App* info = app.add_subcommand("info", "show the cache, NVRTC, driver and device");
  info->add_flag("--json", *info_json, "print one JSON object on stdout");
  CLI::App* clear = app.add_subcommand("clear", "remove every disk cache entry");
  CLI::App* exp = app.add_subcommand("export", "write every valid cache entry into one archive");
  exp->add_option("FILE", *archive, "archive to write; - for standard output")->required();
  CLI::App* imp = app.add_subcommand("import", "verify and add the entries of an archive");
  imp->add_option("FILE", *archive, "archive to read; - for standard input")->required();

  return {
      {list, [&global, list_json] { return run_list(global, *list_json); }},
      {info, [&global, info_json] { return run_info(global, *info_json); }},
      {clear, [&global] { return run_clear(global); }},
      {exp, [&global, archive] { return run_export(global, *archive); }},
      {imp, [&global, archive] { return run_import(global, *archive); }},
  };
}

}  // namespace conv3djit::cli
