#pragma once
// Tuned records: the winner of Engine::tune() for one description on one kind of device, kept in
// the disk cache beside the cubins (and exported and imported with them). A record holds the
// configuration text that plans the winner and the winner's kernel key, which a later plan must
// reproduce, or the record is ignored (a library whose planner changed under the same version).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "conv3djit/conv3d.hpp"

namespace conv3djit::detail {

/// What besides the description can change which kernel is fastest: the device's name, SM count
/// and clocks, the driver, and this library.
struct DeviceIdentity {
  std::string name;
  int sm_count = 0;
  int clock_mhz = 0;         // the SMs' maximum clock
  int memory_clock_mhz = 0;  // the memory's peak clock
  int driver_version = 0;
  /// "NVIDIA H200|sms=132|clock=1980|mem_clock=3201|driver=13000|lib=0.9.0"
  std::string text() const;
};

inline constexpr int kRecordFormatVersion = 1;

/// The disk cache key of desc's record on such a device: "tuned|<describe(desc)>|<device>|format=1".
std::string record_key_text(const Conv3dDesc& desc, const DeviceIdentity& device);
/// Whether a disk cache key text is a record's (not a cubin's).
bool is_record_key(std::string_view key_text);
/// "tuned N1_C3_... on NVIDIA H200 (132 SMs)", for listings.
std::string readable_record_key(std::string_view key_text);

struct TunedRecord {
  std::string config;          // plans the winner (EngineOptions::kernel_config form)
  std::string kernel;          // canonical_text of the winner's key
  double median_ms = 0;        // the winner's time
  double heuristic_ms = 0;     // the planner's choice's time on the same run
  int candidates = 0;          // timed
  int64_t tuned_unix = 0;      // when
};

/// The payload: one "name=value" line per field.
std::string encode_record(const TunedRecord& record);
/// nullopt for a payload that is not a whole record.
std::optional<TunedRecord> decode_record(std::string_view payload);

}  // namespace conv3djit::detail
