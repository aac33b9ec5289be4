#include "jit/kernel_sources.hpp"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

#include "conv3djit/error.hpp"
#include "core/hash.hpp"

namespace conv3djit::detail {
namespace {

const KernelSource* find_source(std::string_view name) {
  int count = 0;
  const KernelSource* sources = kernel_sources(&count);
  for (int i = 0; i < count; ++i) {
    if (name == sources[i].name) return &sources[i];
  }
  return nullptr;
}

// The names in `#include "name"` lines of text (system headers, in <>, are not embedded).
std::vector<std::string> quoted_includes(std::string_view text) {
  std::vector<std::string> names;
  for (size_t pos = text.find("#include \""); pos != std::string_view::npos; pos = text.find("#include \"", pos)) {
    pos += 10;
    const size_t end = text.find('"', pos);
    if (end == std::string_view::npos) break;
    names.emplace_back(text.substr(pos, end - pos));
  }
  return names;
}

std::string closure_hash(const char* entry) {
  std::set<std::string> seen;  // ordered: the hash does not depend on include order
  std::vector<std::string> todo = {entry};
  while (!todo.empty()) {
    const std::string name = todo.back();
    todo.pop_back();
    if (!seen.insert(name).second) continue;
    const KernelSource* src = find_source(name);
    if (src == nullptr) {
      throw Error(ErrorCategory::InvalidArgument, fmt::format("kernel source '{}' is not embedded", name));
    }
    for (auto& inc : quoted_includes(src->text)) {
      if (find_source(inc) != nullptr) todo.push_back(std::move(inc));
    }
  }
  std::string all;
  for (const std::string& name : seen) all += fmt::format("{} {}\n", name, find_source(name)->sha256);
  return hash128_hex(all);
}

}  // namespace

const std::string& kernel_source_hash(const char* entry) {
  static std::mutex mutex;
  static std::map<std::string, std::string, std::less<>> hashes;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = hashes.find(std::string_view(entry));
  if (it == hashes.end()) it = hashes.emplace(entry, closure_hash(entry)).first;
  return it->second;
}

}  // namespace conv3djit::detail
