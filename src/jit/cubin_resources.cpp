#include "jit/cubin_resources.hpp"

#include <cstdint>
#include <cstring>
#include <optional>

namespace conv3djit::detail {
namespace {

// .nv.info records: a format byte, an attribute byte, then by format nothing (NVAL), two bytes
// (BVAL, HVAL) or a 16-bit size and that many bytes (SVAL). The per-function attributes used here
// are SVALs of two 32-bit words: the function's symbol index and the value.
constexpr uint8_t kFormatNone = 1, kFormatByte = 2, kFormatHalf = 3, kFormatSized = 4;
constexpr uint8_t kAttrFrameSize = 0x11, kAttrRegisterCount = 0x2f;

class Elf {
 public:
  explicit Elf(const std::string& bytes) : b_(bytes) {}

  template <class T>
  std::optional<T> read(uint64_t at) const {
    if (at > b_.size() || b_.size() - at < sizeof(T)) return std::nullopt;
    T v;
    std::memcpy(&v, b_.data() + at, sizeof(T));
    return v;
  }

  // An ELF64 section header, field for field (64 bytes, no padding).
  struct Section {
    uint32_t name, type;
    uint64_t flags, address, offset, size;
    uint32_t link, info;
    uint64_t align, entry_size;
  };
  static_assert(sizeof(Section) == 64);

  std::optional<Section> section(uint16_t i) const {
    const auto table = read<uint64_t>(0x28);
    const auto entry = read<uint16_t>(0x3a);
    if (!table || !entry || i >= sections() || *entry < sizeof(Section)) return std::nullopt;
    const auto s = read<Section>(*table + uint64_t{i} * *entry);
    // SHT_NOBITS (8: shared memory) takes no bytes of the file.
    if (!s || (s->type != 8 && (s->offset > b_.size() || s->size > b_.size() - s->offset))) return std::nullopt;
    return s;
  }

  uint16_t sections() const { return read<uint16_t>(0x3c).value_or(0); }

  // The NUL-terminated string at `at` of the string table `table`.
  std::string string(const Section& table, uint32_t at) const {
    if (at >= table.size) return {};
    const char* start = b_.data() + table.offset + at;
    const size_t max = table.size - at;
    return std::string(start, strnlen(start, max));
  }

  bool valid() const { return b_.size() >= 64 && b_.compare(0, 4, "\x7f" "ELF") == 0 && b_[4] == 2 && b_[5] == 1; }

 private:
  const std::string& b_;
};

}  // namespace

CubinResources cubin_resources(const std::string& cubin, const std::string& lowered_name) {
  CubinResources r;
  const Elf elf(cubin);
  if (!elf.valid()) return r;
  const auto names = elf.section(elf.read<uint16_t>(0x3e).value_or(0));
  if (!names) return r;
  // The kernel's index in the symbol table (SHT_SYMTAB = 2, 24-byte entries).
  std::optional<uint32_t> symbol;
  std::optional<Elf::Section> info;
  for (uint16_t i = 0; i < elf.sections(); ++i) {
    const auto s = elf.section(i);
    if (!s) return r;
    const std::string name = elf.string(*names, s->name);
    if (name == ".nv.info") info = s;
    if (name == ".text." + lowered_name) r.code_bytes = static_cast<long long>(s->size);
    if (s->type != 2 || s->entry_size != 24) continue;
    const auto strings = elf.section(static_cast<uint16_t>(s->link));
    if (!strings) return r;
    for (uint64_t k = 0; k < s->size / 24 && !symbol; ++k) {
      const auto at = elf.read<uint32_t>(s->offset + k * 24);  // the symbol's name in `strings`
      if (at && elf.string(*strings, *at) == lowered_name) symbol = static_cast<uint32_t>(k);
    }
  }
  if (!symbol || !info) return r;
  for (uint64_t at = info->offset, end = info->offset + info->size; at + 2 <= end;) {
    const uint8_t format = static_cast<uint8_t>(cubin[at]), attribute = static_cast<uint8_t>(cubin[at + 1]);
    if (format == kFormatNone) {
      at += 2;
    } else if (format == kFormatByte || format == kFormatHalf) {
      at += 4;
    } else if (format == kFormatSized) {
      const auto size = elf.read<uint16_t>(at + 2);
      if (!size || at + 4 + *size > end) break;
      const auto function = elf.read<uint32_t>(at + 4), value = elf.read<uint32_t>(at + 8);
      if (*size == 8 && function && value && *function == *symbol) {
        if (attribute == kAttrRegisterCount) r.registers = static_cast<int>(*value);
        if (attribute == kAttrFrameSize) r.stack_bytes = static_cast<int>(*value);
      }
      at += 4 + *size;
    } else {
      break;  // a format this reader does not know: what it read so far stands
    }
  }
  return r;
}

}  // namespace conv3djit::detail
