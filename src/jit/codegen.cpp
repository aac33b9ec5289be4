#include "jit/codegen.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "conv3djit/error.hpp"
#include "core/hash.hpp"

namespace conv3djit::detail {

namespace {
// wgmma exists only on the arch-specific target: sm_90 -> sm_90a (compute_90a).
std::string arch_specific(const std::string& arch) { return arch.back() == 'a' ? arch : arch + "a"; }

// The kernels' element types (common/element.cuh).
const char* element_type(DataType t) {
  switch (t) {
    case DataType::Float32: return "float";
    case DataType::BFloat16: return "conv3djit::bf16";
    case DataType::Float16: return "conv3djit::fp16";
  }
  return "void";
}
}  // namespace

std::string traits_struct(const SpecKey& k, const std::string& name) {
  const unsigned uses = k.kernel->uses;
  std::string s = fmt::format("struct {} {{\n  // {}\n  using element = {};\n  using out_element = {};\n", name,
                              canonical_text(k), element_type(k.dtype), element_type(k.out_dtype));
  auto constant = [&s](const char* field, int64_t value) { s += fmt::format("  static constexpr int {} = {};\n", field, value); };
  constant("ndhwc", k.layout == Layout::NDHWC ? 1 : 0);
  if (uses & kUsesClass) constant("fp32_class", k.precision == Precision::Fp32 ? 1 : 0);  // 3xTF32 or TF32
  if (uses & kUsesEpilogue) {  // common/epilogue.cuh numbers the activations as the enum does
    constant("act", static_cast<int>(k.epilogue.activation));
    constant("scaled", k.epilogue.scaled ? 1 : 0);
    constant("residual", k.epilogue.residual ? 1 : 0);
  }
  if (uses & kUsesKernelExtents) {
    constant("cg", k.c_per_group);
    constant("kd", k.kd), constant("kh", k.kh), constant("kw", k.kw);
  }
  if (uses & kUsesStrides) {
    constant("sd", k.sd), constant("sh", k.sh), constant("sw", k.sw);
    constant("dd", k.dd), constant("dh", k.dh), constant("dw", k.dw);
    constant("pad_mode", static_cast<int>(k.padding_mode));  // common/padding.cuh numbers them as the enum
  }
  for (size_t i = 0; i < k.kernel->fields.size(); ++i) constant(k.kernel->fields[i].name, k.config[i]);
  return s + "};\n";
}

GeneratedKernel generate(const SpecKey& k, const std::string& arch) {
  if (k.kernel == nullptr) throw Error(ErrorCategory::InvalidArgument, "generate: a key without a kernel");
  GeneratedKernel g;
  // A struct name per specialisation, so that profilers tell the kernels apart.
  const std::string name = fmt::format("{}_{}", k.kernel->name, hash128_hex(canonical_text(k)).substr(0, 12));
  g.source = fmt::format("#include \"{}\"\nnamespace conv3djit::spec {{\n{}}}  // namespace conv3djit::spec\n",
                         k.kernel->source, traits_struct(k, name));
  g.name_expression = fmt::format("conv3djit::{}<conv3djit::spec::{}>", k.kernel->name, name);
  // No fast-math: the fp32 class must match float64 within 1e-6 rel-L2. FMA contraction stays on
  // (it only makes results more accurate).
  g.options = {"--gpu-architecture=" + (k.kernel->arch_specific ? arch_specific(arch) : arch), "-std=c++17",
               "--fmad=true"};
  std::sort(g.options.begin(), g.options.end());
  return g;
}

}  // namespace conv3djit::detail
