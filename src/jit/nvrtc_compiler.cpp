#include "jit/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <vector>

#include "conv3djit/engine.hpp"
#include "conv3djit/error.hpp"
#include "jit/cubin_resources.hpp"
#include "jit/kernel_sources.hpp"

namespace conv3djit::detail {
namespace {

struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    nvrtcDestroyProgram(p);
    delete p;
  }
};

[[noreturn]] void fail(const GeneratedKernel& k, const std::string& what, const std::string& log) {
  throw Error(ErrorCategory::CompileFailed,
              fmt::format("NVRTC {} for '{}' with options [{}]{}{}", what, k.name_expression,
                          fmt::join(k.options, " "), log.empty() ? "" : ":\n", log));
}

void check(nvrtcResult r, const GeneratedKernel& k, const char* what) {
  if (r != NVRTC_SUCCESS) fail(k, fmt::format("{} failed ({})", what, nvrtcGetErrorString(r)), "");
}

}  // namespace

std::vector<int> nvrtc_supported_archs() {
  int count = 0;
  std::vector<int> archs;
  if (nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
    archs.resize(static_cast<size_t>(count));
    if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) archs.clear();
  }
  std::sort(archs.begin(), archs.end());
  return archs;
}

void check_arch(const std::string& arch) {
  const std::vector<int> archs = nvrtc_supported_archs();
  const auto listing = [&] {
    std::vector<std::string> names;
    for (int a : archs) names.push_back(fmt::format("sm_{}", a));
    return fmt::format("this NVRTC ({}) supports {} (and sm_XYa from sm_90, sm_XYf from sm_100)",
                       nvrtc_version(), fmt::join(names, ", "));
  };
  // At most four digits: a longer number is no arch, and must not reach an integer conversion.
  size_t digits = 0;
  while (3 + digits < arch.size() && digits < 5 && std::isdigit(static_cast<unsigned char>(arch[3 + digits]))) ++digits;
  const std::string suffix = arch.size() > 3 ? arch.substr(3 + digits) : "";
  if (arch.rfind("sm_", 0) != 0 || digits < 2 || digits > 4 || (!suffix.empty() && suffix != "a" && suffix != "f")) {
    throw Error(ErrorCategory::InvalidArgument,
                fmt::format("arch = '{}': expected sm_XY, sm_XYa or sm_XYf (e.g. sm_90); {}", arch, listing()));
  }
  const int cc = std::stoi(arch.substr(3, digits));
  const bool known = std::binary_search(archs.begin(), archs.end(), cc);
  if (!known || (suffix == "a" && cc < 90) || (suffix == "f" && cc < 100)) {
    throw Error(ErrorCategory::Unsupported, fmt::format("arch = '{}': {}", arch, listing()));
  }
}

namespace {

// Whether this NVRTC caches compiles by itself (12.9 and later), and so takes --no-cache.
bool nvrtc_keeps_its_own_cache() {
  static const bool keeps = [] {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return false;
    return major > 12 || (major == 12 && minor >= 9);
  }();
  return keeps;
}

}  // namespace

CompiledKernel nvrtc_compile(const GeneratedKernel& k) {
  int count = 0;
  const KernelSource* sources = kernel_sources(&count);
  std::vector<const char*> names, texts;
  for (int i = 0; i < count; ++i) {
    names.push_back(sources[i].name);
    texts.push_back(sources[i].text);
  }
  std::unique_ptr<nvrtcProgram, ProgramDeleter> prog(new nvrtcProgram{});
  check(nvrtcCreateProgram(prog.get(), k.source.c_str(), "conv3djit_kernel.cu", count, texts.data(),
                           names.data()),
        k, "nvrtcCreateProgram");
  check(nvrtcAddNameExpression(*prog, k.name_expression.c_str()), k, "nvrtcAddNameExpression");
  std::vector<const char*> options;
  for (const auto& o : k.options) options.push_back(o.c_str());
  // NVRTC 12.9 and later keep their results in the CUDA driver's compute cache where a driver is
  // present: cubins outside conv3djit's own cache (its checksums, trust rules, export and import),
  // and compiles that report a cache hit as their time (a 350 ms kernel "compiled" again in 19 ms
  // on a GPU machine). The option changes nothing in the cubin, so it is not part of the cache key.
  if (nvrtc_keeps_its_own_cache()) options.push_back("--no-cache");
  const nvrtcResult result = nvrtcCompileProgram(*prog, static_cast<int>(options.size()), options.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(*prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 1) nvrtcGetProgramLog(*prog, log.data());
  log.resize(log_size > 0 ? log_size - 1 : 0);
  if (result != NVRTC_SUCCESS) fail(k, fmt::format("compile failed ({})", nvrtcGetErrorString(result)), log);

  CompiledKernel out;
  const char* lowered = nullptr;
  check(nvrtcGetLoweredName(*prog, k.name_expression.c_str(), &lowered), k, "nvrtcGetLoweredName");
  out.lowered_name = lowered;
  size_t size = 0;
  check(nvrtcGetCUBINSize(*prog, &size), k, "nvrtcGetCUBINSize");
  if (size == 0) fail(k, "produced no cubin (is the arch an sm_ target?)", log);
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(*prog, out.cubin.data()), k, "nvrtcGetCUBIN");
  while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
  out.notes = std::move(log);
  return out;
}

CompiledKernel nvrtc_compile_spill_free(const GeneratedKernel& kernel, int blocks_an_sm, int* attempts) {
  CompiledKernel best = nvrtc_compile(kernel);
  int tries = 1;
  int stack = cubin_resources(best.cubin, best.lowered_name).stack_bytes;
  for (const int blocks : {blocks_an_sm * 3 / 4, 1}) {
    if (stack <= 0 || blocks >= blocks_an_sm || blocks < 1) continue;
    GeneratedKernel relaxed = kernel;
    relaxed.options.push_back(fmt::format("-DCONV3DJIT_MIN_BLOCKS={}", blocks));
    CompiledKernel again = nvrtc_compile(relaxed);
    ++tries;
    const int again_stack = cubin_resources(again.cubin, again.lowered_name).stack_bytes;
    if (again_stack < stack) {
      best = std::move(again);
      stack = again_stack;
    }
    blocks_an_sm = blocks;
  }
  if (attempts) *attempts = tries;
  return best;
}

std::string nvrtc_version_text() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

}  // namespace conv3djit::detail

namespace conv3djit {
std::vector<std::string> supported_archs() {
  std::vector<std::string> names;
  for (int a : detail::nvrtc_supported_archs()) names.push_back(fmt::format("sm_{}", a));
  return names;
}

void check_arch(const std::string& arch) { detail::check_arch(arch); }

std::string nvrtc_version() {
  static const std::string v = detail::nvrtc_version_text();
  return v;
}
}  // namespace conv3djit
