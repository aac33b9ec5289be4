#include "tune/record.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <map>

#include "conv3djit/engine.hpp"

namespace conv3djit::detail {

namespace {
constexpr std::string_view kRecordPrefix = "tuned|";
}

std::string DeviceIdentity::text() const {
  return fmt::format("{}|sms={}|clock={}|mem_clock={}|driver={}|lib={}", name, sm_count, clock_mhz, memory_clock_mhz,
                     driver_version, version());
}

std::string record_key_text(const Conv3dDesc& desc, const DeviceIdentity& device) {
  return fmt::format("{}{}|{}|format={}", kRecordPrefix, describe(desc), device.text(), kRecordFormatVersion);
}

bool is_record_key(std::string_view key_text) { return key_text.substr(0, kRecordPrefix.size()) == kRecordPrefix; }

std::string readable_record_key(std::string_view key_text) {
  std::string_view rest = key_text.substr(kRecordPrefix.size());
  const std::string_view desc = rest.substr(0, rest.find('|'));
  rest.remove_prefix(std::min(rest.size(), desc.size() + 1));
  const std::string_view device = rest.substr(0, rest.find('|'));
  std::string_view sms;
  if (const size_t at = rest.find("|sms="); at != std::string_view::npos) {
    sms = rest.substr(at + 5);
    sms = sms.substr(0, sms.find('|'));
  }
  return fmt::format("tuned {} on {}{}", desc, device, sms.empty() ? "" : fmt::format(" ({} SMs)", sms));
}

std::string encode_record(const TunedRecord& r) {
  return fmt::format("config={}\nkernel={}\nmedian_ms={:.6f}\nheuristic_ms={:.6f}\ncandidates={}\ntuned_unix={}\n",
                     r.config, r.kernel, r.median_ms, r.heuristic_ms, r.candidates, r.tuned_unix);
}

std::optional<TunedRecord> decode_record(std::string_view payload) {
  std::map<std::string, std::string, std::less<>> fields;
  while (!payload.empty()) {
    const size_t end = payload.find('\n');
    if (end == std::string_view::npos) return std::nullopt;  // every line ends: a torn payload does not
    const std::string_view line = payload.substr(0, end);
    payload.remove_prefix(end + 1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    fields.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  const auto number = [&](const char* name, double* out) {
    auto it = fields.find(name);
    if (it == fields.end() || it->second.empty()) return false;
    char* end = nullptr;
    *out = std::strtod(it->second.c_str(), &end);
    return *end == '\0';
  };
  TunedRecord r;
  double candidates = 0, unix_time = 0;
  auto config = fields.find("config");
  auto kernel = fields.find("kernel");
  if (config == fields.end() || kernel == fields.end() || config->second.empty() || kernel->second.empty() ||
      !number("median_ms", &r.median_ms) || !number("heuristic_ms", &r.heuristic_ms) ||
      !number("candidates", &candidates) || !number("tuned_unix", &unix_time)) {
    return std::nullopt;
  }
  r.config = config->second;
  r.kernel = kernel->second;
  r.candidates = static_cast<int>(candidates);
  r.tuned_unix = static_cast<int64_t>(unix_time);
  return r;
}

}  // namespace conv3djit::detail
