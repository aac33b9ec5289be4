#include "jit/spec_key.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "conv3djit/engine.hpp"
#include "jit/kernel_sources.hpp"

namespace conv3djit::detail {

const char* to_string(DataType t) noexcept { return dtype_name(t); }

const char* to_string(Layout l) noexcept { return layout_name(l); }

const char* to_string(Precision p) noexcept { return p == Precision::Tf32 ? "tf32" : "fp32"; }

std::string to_string(EpilogueKind e) {
  std::string text = "bias";
  if (e.scaled) text += "+scale";
  if (e.activation != Activation::Identity) text += fmt::format("+{}", activation_name(e.activation));
  if (e.residual) text += "+res";
  return text;
}

int32_t SpecKey::field(const char* name) const {
  if (kernel != nullptr) {
    for (size_t i = 0; i < kernel->fields.size(); ++i) {
      if (std::strcmp(kernel->fields[i].name, name) == 0) return config[i];
    }
  }
  throw std::out_of_range(fmt::format("{} has no field '{}'", kernel ? kernel->name : "a key without kernel", name));
}

bool SpecKey::operator==(const SpecKey& o) const noexcept {
  return kernel == o.kernel && dtype == o.dtype && out_dtype == o.out_dtype && layout == o.layout && precision == o.precision &&
         epilogue == o.epilogue && padding_mode == o.padding_mode && c_per_group == o.c_per_group && kd == o.kd && kh == o.kh && kw == o.kw &&
         sd == o.sd && sh == o.sh && sw == o.sw && dd == o.dd && dh == o.dh && dw == o.dw &&
         std::memcmp(config, o.config, sizeof(config)) == 0;
}

size_t SpecKeyHash::operator()(const SpecKey& k) const noexcept {
  // FNV-1a over the fields; on the hot path of every conv3d call, so no string building.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t f) {
    h ^= f;
    h *= 1099511628211ull;
  };
  mix(reinterpret_cast<uintptr_t>(k.kernel));
  mix(static_cast<uint64_t>(k.dtype) | static_cast<uint64_t>(k.layout) << 8 | static_cast<uint64_t>(k.precision) << 16 |
      static_cast<uint64_t>(k.epilogue.activation) << 24 | static_cast<uint64_t>(k.epilogue.residual) << 32 |
      static_cast<uint64_t>(k.epilogue.scaled) << 33 | static_cast<uint64_t>(k.padding_mode) << 40 |
      static_cast<uint64_t>(k.out_dtype) << 48);
  for (int32_t f : {k.c_per_group, k.kd, k.kh, k.kw, k.sd, k.sh, k.sw, k.dd, k.dh, k.dw}) mix(static_cast<uint32_t>(f));
  for (int32_t f : k.config) mix(static_cast<uint32_t>(f));
  return static_cast<size_t>(h);
}

std::string canonical_text(const SpecKey& k) {
  if (k.kernel == nullptr) return "none";
  const unsigned uses = k.kernel->uses;
  std::string text = fmt::format("{} {} {}", k.kernel->name, to_string(k.dtype), to_string(k.layout));
  if (k.out_dtype != k.dtype) text += fmt::format(" out={}", to_string(k.out_dtype));
  if (uses & kUsesClass) text += fmt::format(" class={}", to_string(k.precision));
  if (uses & kUsesEpilogue) text += fmt::format(" epi={}", to_string(k.epilogue));
  if (uses & kUsesKernelExtents) text += fmt::format(" cg={} k={}x{}x{}", k.c_per_group, k.kd, k.kh, k.kw);
  if (uses & kUsesStrides) {
    text += fmt::format(" s={}x{}x{} d={}x{}x{}", k.sd, k.sh, k.sw, k.dd, k.dh, k.dw);
    if (k.padding_mode != PaddingMode::Zeros) text += fmt::format(" pad={}", padding_mode_name(k.padding_mode));
  }
  for (size_t i = 0; i < k.kernel->fields.size(); ++i) text += fmt::format(" {}={}", k.kernel->fields[i].name, k.config[i]);
  return text;
}

std::string cache_key_text(const SpecKey& key, const std::string& arch,
                           const std::vector<std::string>& options) {
  return fmt::format("{}|arch={}|nvrtc={}|src={}|opts={}|lib={}|keyfmt={}", canonical_text(key), arch,
                     nvrtc_version(), key.kernel ? kernel_source_hash(key.kernel->source) : "none",
                     fmt::join(options, " "), version(), kKeyFormatVersion);
}

std::string readable_key(std::string_view key_text) {
  const std::string_view fields = key_text.substr(0, key_text.find('|'));
  std::vector<std::string_view> kept;
  size_t index = 0;
  for (size_t start = 0; start < fields.size(); ++index) {
    size_t end = fields.find(' ', start);
    if (end == std::string_view::npos) end = fields.size();
    const std::string_view word = fields.substr(start, end - start);
    start = end + 1;
    static constexpr std::string_view kShown[] = {"class=", "epi=", "cg=", "k=", "s=", "d=", "pad=", "out="};
    const bool shown = std::any_of(std::begin(kShown), std::end(kShown),
                                   [&](std::string_view prefix) { return word.rfind(prefix, 0) == 0; }) ||
                       (index == 2 && word != to_string(Layout::NCDHW));
    if (index < 2 || shown) kept.push_back(word);  // the kernel's name and element type come first
  }
  if (const size_t at = key_text.find("|arch="); at != std::string_view::npos) {
    const std::string_view arch = key_text.substr(at + 6);
    kept.push_back(arch.substr(0, arch.find('|')));
  }
  return fmt::format("{}", fmt::join(kept, " "));
}

}  // namespace conv3djit::detail
