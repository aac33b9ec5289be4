// bf16 and fp16 convolutions on the GPU against the float64 reference of the same half inputs:
// every kernel the planner can pick for half types (igemm_sm80, igemm_sm90 on a float32 copy for
// layers of few channels on sm_90, grouped_mma and grouped for grouped layers, direct for what
// they decline) and
// forced tiles, both layouts, float32 outputs, extents that end mid-tile, C = 3 and 5, every
// activation with a residual, padding modes, inputs in [-1, 1) and [0, 1), a long reduction, an
// input off a 16-byte boundary, and tensors of more than 2^31 elements (an NDHWC pointwise one and
// an NDHWC image of more on gemm_sm90 on sm_90). Skipped (exit 77) without
// a device. Timings of the reference problem: "[timing]" (hidden; run by name).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "config_cases.hpp"
#include "conv3djit/half.hpp"
#include "core/problem.hpp"
#include "driver/driver_api.hpp"
#include "gpu_check.hpp"
#include "kernel_cases.hpp"

using namespace conv3djit;

namespace {

using test::make;

Conv3dDesc typed(Conv3dDesc d, DataType type, Layout layout, bool fp32_output) {
  d.dtype = type;
  d.layout = layout;
  d.fp32_output = fp32_output;
  return d;
}

struct TypeCombo {
  DataType type;
  Layout layout;
  bool fp32_output;
};

std::vector<TypeCombo> all_combos() {
  std::vector<TypeCombo> out;
  for (const DataType t : {DataType::BFloat16, DataType::Float16})
    for (const Layout l : {Layout::NCDHW, Layout::NDHWC})
      for (const bool f : {false, true}) out.push_back({t, l, f});
  return out;
}

// Dense layers with extents that end mid-tile: C = 3 (the reference kernel), C = 5 with stride and
// dilation, C = 16 (NDHWC's 16-byte groups), pointwise C = 8, and K past one column tile.
std::vector<Conv3dDesc> dense_shapes() {
  return {
      make(2, 3, {9, 13, 17}, 24, {3, 5, 7}, 1, Dims3{1, 2, 3}, 1, 1, true),
      make(1, 5, {7, 9, 11}, 40, {3, 3, 3}, {1, 2, 1}, 1, {1, 1, 2}),
      make(2, 16, {5, 8, 9}, 70, {3, 3, 3}, 1, 1, 1, 1, true),
      make(1, 8, {4, 6, 7}, 33, {1, 1, 1}),
  };
}


// grouped_mma's layers: groups of 8 channels (27 items, an odd count: the last step's second half
// reads zeros), 16 with a stride along H and dilation along W (two warps a group, 54 items), 24 ->
// 48 (two column blocks a warp, three warps a group), 4 -> 4 (half-filled items and column blocks)
// and 8 -> 4, each with extents that end mid-tile.
std::vector<Conv3dDesc> grouped_mma_shapes() {
  return {make(2, 32, {5, 9, 30}, 32, {3, 3, 3}, 1, 1, 1, 4, true),
          make(1, 64, {6, 11, 13}, 64, {3, 3, 3}, {1, 2, 1}, 1, {1, 1, 2}, 4),
          make(1, 48, {4, 7, 20}, 96, {1, 3, 3}, 1, 1, 1, 2, true),
          make(2, 16, {5, 9, 12}, 16, {3, 3, 3}, 1, 1, 1, 4, true),
          make(1, 32, {4, 6, 10}, 16, {3, 3, 3}, {1, 1, 2}, 1, 1, 4, true)};
}

using Case = test::KernelCase;
using test::family_of;
using test::worst_rel_l2;

const std::vector<std::string> kForced = {"igemm_sm80:32,32", "igemm_sm80:64,64", "igemm_sm80:128,128",
                                          "igemm:128,32", "direct"};

std::vector<Case> kernel_cases() {
  std::vector<Case> out;
  const std::vector<TypeCombo> combos = all_combos();
  // Layers of up to 32 channels (NDHWC: 31) take igemm_sm90 on sm_90, igemm_sm80 elsewhere.
  for (const TypeCombo& c : combos) {
    for (const Conv3dDesc& d : dense_shapes()) {
      out.push_back({"", typed(d, c.type, c.layout, c.fp32_output), ""});
    }
    // Grouped and depthwise layers: the grouped kernel in both layouts.
    const char* grouped = "grouped";
    out.push_back({"", typed(make(1, 8, {5, 6, 7}, 12, {3, 3, 3}, 1, 1, 1, 2, true), c.type, c.layout, c.fp32_output), grouped});
    out.push_back({"", typed(make(2, 6, {4, 9, 11}, 6, {3, 3, 3}, {1, 2, 1}, 1, 1, 6), c.type, c.layout, c.fp32_output),
                   grouped});
    // Groups of 8 channels or more: grouped_mma.
    for (const Conv3dDesc& d : grouped_mma_shapes()) {
      out.push_back({"", typed(d, c.type, c.layout, c.fp32_output), "grouped_mma"});
    }
  }
  // grouped_mma's forced tiles: one group a block of 2 x 8 positions; runs of 2 output planes (5
  // of them: the last run short) through a ring of 4 input planes with two warps a group over the
  // m16 blocks; 8 x 4 (rows past the plane) with two column blocks a warp and runs of 4 of 6
  // planes.
  const char* const mma_configs[] = {"grouped_mma:2,8,1,1", "grouped_mma:4,8,2,2,1,2", "grouped_mma:8,4,1,4,2"};
  const size_t mma_shapes[] = {0, 0, 2};
  for (size_t i = 0; i < combos.size(); ++i) {
    const TypeCombo& c = combos[i];
    for (size_t f = 0; f < 3; ++f) {
      if ((i + f) % 2 != 0) continue;
      out.push_back({mma_configs[f], typed(grouped_mma_shapes()[mma_shapes[f]], c.type, c.layout, c.fp32_output),
                     "grouped_mma"});
    }
  }
  // Forced tiles and direct: on half the combinations each (every type, layout and output type).
  for (size_t i = 0; i < combos.size(); ++i) {
    for (size_t f = 0; f < kForced.size(); ++f) {
      if ((i + f) % 2 != 0) continue;
      const TypeCombo& c = combos[i];
      for (const size_t s : {size_t{0}, size_t{2}}) {
        out.push_back({kForced[f], typed(dense_shapes()[s], c.type, c.layout, c.fp32_output),
                       kForced[f] == "direct" ? "direct" : "igemm_sm80"});
      }
    }
  }
  return out;
}

std::vector<Case> epilogue_cases() {
  std::vector<Case> out;
  const Conv3dDesc shapes[] = {typed(dense_shapes()[0], DataType::BFloat16, Layout::NDHWC, false),
                               typed(dense_shapes()[2], DataType::Float16, Layout::NCDHW, true),
                               typed(dense_shapes()[2], DataType::Float16, Layout::NDHWC, false)};
  for (const Conv3dDesc& base : shapes) {
    for (Epilogue e : test::epilogue_cases()) {
      // A clamp that cuts most outputs to its bounds shrinks the output's norm, not the other
      // outputs' rounding: keep most (as the tf32 class does).
      e.clamp_min = -3.f, e.clamp_max = 4.f;
      Conv3dDesc d = base;
      d.epilogue = e;
      out.push_back({"", d, ""});
    }
  }
  // grouped_mma's store paths (NCDHW and NDHWC): GELU, scaled, with the residual (4 output channels
  // a group: half of each column block stored).
  for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
    for (const size_t s : {size_t{0}, size_t{1}, size_t{3}}) {
      Conv3dDesc g = typed(grouped_mma_shapes()[s], s == 0 ? DataType::BFloat16 : DataType::Float16, layout,
                           layout == Layout::NDHWC);
      g.epilogue = test::epilogue_cases()[3];
      g.epilogue.residual = true;
      g.epilogue.clamp_min = -3.f, g.epilogue.clamp_max = 4.f;
      out.push_back({"", g, "grouped_mma"});
    }
  }
  // The grouped kernel's store path: GELU, scaled, with the residual, in both output types.
  for (const bool fp32_output : {false, true}) {
    Conv3dDesc g = typed(make(2, 16, {4, 7, 10}, 8, {3, 3, 3}, 1, 1, 1, 4, true), DataType::BFloat16, Layout::NCDHW,
                         fp32_output);
    g.epilogue = test::epilogue_cases()[3];
    g.epilogue.residual = true;
    out.push_back({"", g, "grouped"});
  }
  return out;
}

std::vector<Case> padding_cases() {
  std::vector<Case> out;
  const PaddingMode modes[] = {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular};
  const std::vector<Epilogue> epilogues = test::epilogue_cases();
  size_t i = 0;
  for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
    for (const Conv3dDesc& base : {make(1, 3, {6, 9, 11}, 24, {3, 5, 7}, 1, Padding::per_side({2, 2, 3}, {0, 2, 3})),
                                   make(2, 16, {5, 7, 9}, 40, {3, 3, 3}, {1, 2, 1}, 1, 1, 1, true)}) {
      for (const PaddingMode mode : modes) {
        Conv3dDesc d = typed(base, i % 2 == 0 ? DataType::BFloat16 : DataType::Float16, layout, i % 3 == 0);
        d.padding_mode = mode;
        d.epilogue = epilogues[(5 * i) % epilogues.size()];
        d.epilogue.clamp_min = -3.f, d.epilogue.clamp_max = 4.f;
        out.push_back({"", d, ""});  // (C = 3 and 16: igemm_sm90 on sm_90, in both layouts)
        ++i;
      }
    }
  }
  // grouped_mma stages the mode's sources in its input tile.
  for (const PaddingMode mode : modes) {
    for (const Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
      Conv3dDesc d = typed(grouped_mma_shapes()[0], layout == Layout::NCDHW ? DataType::BFloat16 : DataType::Float16,
                           layout, false);
      d.padding_mode = mode;
      out.push_back({"", d, "grouped_mma"});
    }
  }
  return out;
}

// C * KD * KH * KW = 10800: float32 outputs within 1e-5 need the blocked summation.
std::vector<Case> long_reduction_cases() {
  std::vector<Case> out;
  for (const TypeCombo& c : all_combos())
    out.push_back({"", typed(make(1, 400, {5, 6, 7}, 24, {3, 3, 3}, 1, 1, 1, 1, true), c.type, c.layout, c.fp32_output),
                   ""});  // on sm_90 igemm_sm90_half, elsewhere igemm_sm80
  return out;
}

// The reference problem (checked on the GPU oracle).
std::vector<Case> reference_cases() {
  std::vector<Case> out;
  for (const TypeCombo& c : all_combos()) {
    if (c.type == DataType::Float16 && c.fp32_output) continue;
    out.push_back({"", typed(make(16, 3, {64, 64, 64}, 64, {3, 5, 7}), c.type, c.layout, c.fp32_output),
                   ""});
  }
  return out;
}

// Every shape of `shapes` in both half types and both output types on `family`, every other one
// also with the heaviest epilogue (GELU, scaled, clamped, with the residual); then `more(type,
// fp32_output)`'s cases for that combination.
template <class More>
std::vector<Case> sm90_typed_cases(const std::vector<Conv3dDesc>& shapes, const char* family, More more) {
  Epilogue heavy = test::epilogue_cases()[3];  // GELU, scaled
  heavy.residual = true;
  heavy.clamp_min = -3.f, heavy.clamp_max = 4.f;
  std::vector<Case> out;
  int i = 0;
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    for (const bool fp32_output : {false, true}) {
      for (const Conv3dDesc& base : shapes) {
        Conv3dDesc d = typed(base, type, Layout::NCDHW, fp32_output);
        out.push_back({"", d, family});
        d.epilogue = heavy;
        if (i++ % 2 == 0) out.push_back({"", d, family});
      }
      for (Case& c : more(type, fp32_output)) out.push_back(std::move(c));
    }
  }
  return out;
}

// igemm_sm90 on sm_90 (a float32 copy of the input, one TF32 product): the reference's two-plane
// row tiles with output staging, TH x TW tiles with paired and shuffled pair stores, chunks of
// prepared weights, W % 4 != 0 with stride and dilation, odd widths (pairs off 4 bytes), K past a
// column block, the heaviest epilogue with the residual, both output types; forced tiles (one
// plane, TH x TW tiles, cp.async staging) on the reference's shape.
std::vector<Case> sm90_cases() {
  const Conv3dDesc rows = make(2, 3, {6, 20, 58}, 64, {3, 5, 7}, 1, 0, 1, 1, true);
  const std::vector<Conv3dDesc> shapes = {rows, make(2, 3, {9, 13, 17}, 24, {3, 5, 7}, 1, Dims3{1, 2, 3}, 1, 1, true),
                                          make(1, 24, {5, 9, 12}, 40, {3, 3, 3}, 1, 1, 1, 1, true),
                                          make(2, 5, {7, 9, 11}, 40, {3, 3, 3}, {1, 2, 1}, 1, {1, 1, 2}, 1, true),
                                          make(1, 32, {4, 9, 70}, 72, {3, 3, 3}, 1, 1)};
  return sm90_typed_cases(shapes, "igemm_sm90", [&](DataType type, bool fp32_output) {
    std::vector<Case> forced;
    for (const char* config : {"igemm_sm90:4,64,64,3,1,1,1", "igemm_sm90:8,16,64,3,1,0,1", "igemm_sm90:4,16,32,3",
                               "igemm_sm90:8,16,64,3,0"}) {
      forced.push_back({config, typed(rows, type, Layout::NCDHW, fp32_output), "igemm_sm90"});
    }
    return forced;
  });
}

// igemm_sm90_k16 on sm_90 (k16 products gathered two kw a load from the bf16 / fp16 box): the
// reference's kernel with and without padding, OW no multiple of 8 (odd pairs and runs), stride
// 2, even KW with dilation, K past 64 (two warpgroups of 128 columns), an odd count of kernel
// rows, the heaviest epilogue with the residual (16-bit outputs: read into the output boxes' tiles,
// and from registers where the plane's rows are off 16 bytes) and an activation without it, both
// output types; forced tiles, and blocks walking output planes (runs ending mid-image and past
// its planes, padding along D, 2 to 4 warpgroups, KD 2 and 3, 128 columns, the residual).
std::vector<Case> k16_cases() {
  const std::vector<Conv3dDesc> shapes = {
      make(2, 3, {6, 20, 64}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
      make(1, 3, {5, 17, 40}, 24, {3, 5, 7}, 1, Dims3{1, 2, 3}, 1, 1, true),
      make(2, 3, {4, 32, 48}, 96, {1, 7, 7}, {1, 2, 2}, Dims3{0, 3, 3}),
      make(1, 5, {7, 9, 16}, 40, {3, 3, 6}, 1, Dims3{1, 1, 2}, Dims3{2, 2, 1}, 1, true)};
  return sm90_typed_cases(shapes, "igemm_sm90_k16", [&](DataType type, bool fp32_output) {
    Conv3dDesc boxed = typed(shapes[0], type, Layout::NCDHW, fp32_output);
    boxed.epilogue = test::epilogue_cases()[3];
    Conv3dDesc unboxed = typed(shapes[3], type, Layout::NCDHW, fp32_output);  // 7 x 15 positions a plane
    unboxed.epilogue = test::epilogue_cases()[3];
    unboxed.epilogue.residual = true;
    const Conv3dDesc wide = make(1, 4, {6, 10, 24}, 96, {3, 5, 7}, 1, 1, 1, 1, true);
    const Conv3dDesc two_planes = make(1, 4, {6, 10, 24}, 40, {2, 5, 7}, 1, Dims3{0, 2, 3});
    auto k16 = [&](const char* config, const Conv3dDesc& d) { return Case{config, d, "igemm_sm90_k16"}; };
    return std::vector<Case>{k16("", boxed),
                             k16("", unboxed),
                             k16("igemm_sm90_k16:2,64", typed(shapes[1], type, Layout::NCDHW, fp32_output)),
                             k16("igemm_sm90_k16:2,64,3", typed(shapes[0], type, Layout::NCDHW, fp32_output)),
                             k16("igemm_sm90_k16:3,64,2", typed(shapes[1], type, Layout::NCDHW, fp32_output)),
                             k16("igemm_sm90_k16:2,64,16", boxed),
                             k16("igemm_sm90_k16:2,128,4", typed(wide, type, Layout::NCDHW, fp32_output)),
                             k16("igemm_sm90_k16:4,64,4", typed(two_planes, type, Layout::NCDHW, fp32_output))};
  });
}

// The device plans igemm_sm90 for them (compute capability 9.0): else they are not run.
std::vector<Case> sm90_cases_here() {
  cli::make_context_current();
  std::vector<Case> cases = sm90_cases();
  if (family_of(Engine::global().kernel_for(cases.front().desc)) != "igemm_sm90") return {};
  for (const Case& c : k16_cases()) cases.push_back(c);
  return cases;
}

}  // namespace

TEST_CASE("warm-up: every half-type kernel of this suite compiles, in parallel") {
  cli::make_context_current();
  std::vector<Case> all;
  for (const auto& list :
       {kernel_cases(), epilogue_cases(), padding_cases(), long_reduction_cases(), reference_cases(), sm90_cases_here()})
    all.insert(all.end(), list.begin(), list.end());
  CUcontext ctx = nullptr;
  detail::driver().cuCtxGetCurrent(&ctx);
  std::atomic<size_t> next{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  const unsigned count = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < count; ++t) {
    threads.emplace_back([&] {
      detail::driver().cuCtxSetCurrent(ctx);
      for (size_t i = next++; i < all.size(); i = next++) {
        try {
          test::engine_for(all[i].config).precompile(all[i].desc);
        } catch (const Error& e) {
          std::fprintf(stderr, "%s %s: %s\n", all[i].config.c_str(), describe(all[i].desc).c_str(), e.what());
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
}

TEST_CASE("half types: every kernel the planner can pick, and forced tiles, match the float64 reference") {
  test::check_cases(kernel_cases(), true);
}

TEST_CASE("half types: every activation with scaling and the residual") { test::check_cases(epilogue_cases(), false); }

TEST_CASE("half types: padding modes") { test::check_cases(padding_cases(), true); }

TEST_CASE("half types: a reduction of 10800 terms meets the float32-output class") {
  test::check_cases(long_reduction_cases(), true);
}

TEST_CASE("half types: the reference problem") { test::check_cases(reference_cases(), false); }

TEST_CASE("half types on sm_90: igemm_sm90 on a float32 copy and igemm_sm90_k16 for NCDHW inputs with few channels") {
  test::check_cases(sm90_cases_here(), true);
}

TEST_CASE("half types on sm_90: igemm_sm90_k16's inputs off a 16-byte boundary run igemm_sm90") {
  if (sm90_cases_here().empty()) return;  // not sm_90
  cli::Stream stream;
  std::random_device seeds;
  for (const Case& c : k16_cases()) {
    if (!c.config.empty()) continue;
    DYNAMIC_SECTION(describe(c.desc)) {
      const KernelResources twin = Engine::global().resources(c.desc, stream.get(), false);
      INFO(twin.kernel);
      CHECK(family_of(twin.kernel) == "igemm_sm90");
      const test::GpuCheck r = test::check_against_reference(Engine::global(), c.desc, seeds(), stream, nullptr, {}, 1);
      INFO("rel-L2 " << r.comparison.rel_l2 << ", non-finite " << r.comparison.non_finite);
      CHECK(r.comparison.non_finite == 0);
      CHECK(r.comparison.passed);
    }
  }
}

TEST_CASE("half types: an input off a 16-byte boundary takes the 2-byte gather") {
  cli::make_context_current();
  cli::Stream stream;
  // (grouped_mma's NDHWC input: its 16-byte rows, and its groups of 4 channels, by element loads.)
  for (const Conv3dDesc& d : {typed(dense_shapes()[2], DataType::BFloat16, Layout::NDHWC, false),
                              typed(dense_shapes()[2], DataType::BFloat16, Layout::NCDHW, false),
                              typed(grouped_mma_shapes()[0], DataType::BFloat16, Layout::NDHWC, false),
                              typed(grouped_mma_shapes()[3], DataType::BFloat16, Layout::NDHWC, false)}) {
    DYNAMIC_SECTION(describe(d)) {
      const cli::ProblemData data(d, 23, 1);
      cli::fill_nan(data.d_output);
      Engine::global().run(d, data.tensors(), stream.get());
      stream.synchronize();
      const std::vector<float> got = data.output();
      const std::vector<double> ref = cli::reference_output(Engine::global(), d, data, stream, false);
      const Comparison c = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(d));
      INFO(Engine::global().kernel_for(d) << ": rel-L2 " << c.rel_l2 << ", non-finite " << c.non_finite);
      CHECK(c.non_finite == 0);
      CHECK(c.passed);
    }
  }
}

TEST_CASE("half-type kernels keep every value in registers: no local memory") {
  cli::make_context_current();
  cli::Stream stream;
  std::vector<Case> all = kernel_cases();
  for (const auto& list : {epilogue_cases(), padding_cases(), long_reduction_cases(), reference_cases(), sm90_cases_here()})
    all.insert(all.end(), list.begin(), list.end());
  for (const Case& c : all) {
    const KernelResources r = test::engine_for(c.config).resources(c.desc, stream.get());
    INFO(c.config << " " << describe(c.desc) << ": " << r.kernel << " " << r.registers << " registers");
    if (family_of(r.kernel) == "igemm_sm80" || family_of(r.kernel) == "grouped_mma" ||
        family_of(r.kernel).rfind("igemm_sm90", 0) == 0) {
      CHECK(r.local_bytes == 0);
    } else if (r.local_bytes != 0) {  // direct's fp16 NCDHW kernels keep 16 bytes (docs/kernels/igemm_sm80.md)
      std::printf("local memory: %s %d bytes\n", r.kernel.c_str(), r.local_bytes);
    }
  }
}

namespace {

// A bf16 pattern of index i: a sign and a magnitude in [2^-7, 1), drawn by a hash (so that the
// reference can compute any element without a host copy of the tensor).
uint16_t pattern_bits(uint64_t i) {
  uint64_t x = i * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  const unsigned sign = static_cast<unsigned>(x & 1), exponent = 120 + static_cast<unsigned>((x >> 1) % 7);
  return static_cast<uint16_t>((sign << 15) | (exponent << 7) | ((x >> 8) & 0x7f));
}

// Input element (n, c, z, y, x) of d as a float, in d's layout.
float pattern_input(const Conv3dDesc& d, int64_t n, int64_t c, int64_t z, int64_t y, int64_t x) {
  const int64_t at = d.layout == Layout::NCDHW ? (((n * d.c + c) * d.d + z) * d.h + y) * d.w + x
                                               : (((n * d.d + z) * d.h + y) * d.w + x) * d.c + c;
  return bf16_to_float(pattern_bits(static_cast<uint64_t>(at)));
}

}  // namespace

TEST_CASE("bf16 tensors of more than 2^31 elements: 64-bit offsets") {
  cli::make_context_current();
  cli::Stream stream;
  // NCDHW with C = 4 (the 2-byte gather) and a 3 x 3 x 3 kernel: input 2.2e9, output 4.4e9
  // elements; NDHWC with C = 8 (16-byte groups), pointwise: input and output 2.2e9 elements;
  // NDHWC pointwise 32 -> 128, gemm_sm90's on sm_90 (two images' 72 M rows as one GEMM; an image's
  // input under 2^31 elements): input 2.3e9, output 9.3e9 elements (elsewhere igemm_sm80 plans
  // it, as the second: skipped); and one NDHWC image of 2.2e9 elements, 3 x 3 x 3 -> 128 channels
  // (output 4.4e9), through gemm_sm90's im2col boxes (the planner's on sm_90 only: igemm_sm90_half
  // refuses such images).
  struct Big {
    Conv3dDesc base;
    const char* family;  // the planner's
  };
  const Big bigs[] = {Big{make(4, 4, {520, 512, 512}, 8, {3, 3, 3}, 1, 1, 1, 1, true), "igemm_sm80"},
                      Big{make(2, 8, {260, 512, 1032}, 8, {1, 1, 1}), "igemm_sm80"},
                      Big{make(2, 32, {136, 512, 520}, 128, {1, 1, 1}, 1, 0, 1, 1, true), "gemm_sm90"},
                      Big{make(1, 64, {10, 1800, 1900}, 128, {3, 3, 3}, 1, 1, 1, 1, true), "gemm_sm90"}};
  // The planner takes gemm_sm90 for the third on sm_90 only.
  const bool sm90 =
      family_of(Engine::global().kernel_for(typed(bigs[2].base, DataType::BFloat16, Layout::NDHWC, false))) ==
      "gemm_sm90";
  for (const Big& big : bigs) {
    const Conv3dDesc& base = big.base;
    const Conv3dDesc d = typed(base, DataType::BFloat16, base.c == 4 ? Layout::NCDHW : Layout::NDHWC, false);
    DYNAMIC_SECTION(describe(d)) {
      const detail::Problem prob = detail::make_problem(d);
      REQUIRE(prob.input_elements > (int64_t{1} << 31));
      if (std::string(big.family) == "gemm_sm90" && !sm90) return;
      Engine& engine = Engine::global();
      INFO(engine.kernel_for(d));
      REQUIRE(family_of(engine.kernel_for(d)) == big.family);
      // The input, uploaded in chunks from the pattern; weight and bias from a seed.
      cli::DeviceBuffer input(static_cast<size_t>(prob.input_elements) * 2);
      const int64_t chunk = int64_t{1} << 26;
      std::vector<uint16_t> host(static_cast<size_t>(chunk));
      const int64_t parts = std::max(1u, std::thread::hardware_concurrency());
      for (int64_t at = 0; at < prob.input_elements; at += chunk) {
        const int64_t count = std::min(chunk, prob.input_elements - at);
        std::vector<std::thread> fill;
        for (int64_t part = 0; part < parts; ++part) {
          fill.emplace_back([&, part] {
            for (int64_t i = count * part / parts; i < count * (part + 1) / parts; ++i)
              host[static_cast<size_t>(i)] = pattern_bits(static_cast<uint64_t>(at + i));
          });
        }
        for (auto& th : fill) th.join();
        REQUIRE(detail::driver().cuMemcpyHtoD(input.handle() + static_cast<CUdeviceptr>(at) * 2, host.data(),
                                              static_cast<size_t>(count) * 2) == CUDA_SUCCESS);
      }
      std::mt19937_64 rng(31);
      std::uniform_real_distribution<float> uniform(-1.f, 1.f);
      std::vector<uint16_t> weight(static_cast<size_t>(prob.weight_elements)), bias(static_cast<size_t>(d.k));
      for (auto& w : weight) w = float_to_bf16(uniform(rng));
      for (auto& b : bias) b = float_to_bf16(uniform(rng));
      cli::DeviceBuffer d_weight(weight.size() * 2), d_bias(bias.size() * 2);
      REQUIRE(detail::driver().cuMemcpyHtoD(d_weight.handle(), weight.data(), weight.size() * 2) == CUDA_SUCCESS);
      REQUIRE(detail::driver().cuMemcpyHtoD(d_bias.handle(), bias.data(), bias.size() * 2) == CUDA_SUCCESS);
      cli::DeviceBuffer output(static_cast<size_t>(prob.output_elements) * 2);
      cli::fill_nan(output);
      Conv3dTensors t;
      t.input = input.ptr();
      t.weight = d_weight.ptr();
      t.bias = d.bias ? d_bias.ptr() : nullptr;
      t.output = output.ptr();
      engine.run(d, t, stream.get());
      stream.synchronize();

      // A sample of outputs: the last ones, those past 2^31 and 2^32, and random ones.
      const OutputExtents o = prob.out;
      std::vector<int64_t> sample;
      for (int64_t i = 1; i <= 256; ++i) sample.push_back(prob.output_elements - i);
      for (int64_t base_at : {int64_t{1} << 31, int64_t{1} << 32}) {
        for (int64_t i = -64; i < 64; ++i) {
          if (base_at + i >= 0 && base_at + i < prob.output_elements) sample.push_back(base_at + i);
        }
      }
      std::uniform_int_distribution<int64_t> any(0, prob.output_elements - 1);
      for (int i = 0; i < 2048; ++i) sample.push_back(any(rng));
      std::vector<uint16_t> got(sample.size());
      std::vector<double> ref(sample.size());
      const int64_t kd = d.kernel.d, kh = d.kernel.h, kw = d.kernel.w, pad = d.kernel.d / 2;
      for (size_t s = 0; s < sample.size(); ++s) {
        REQUIRE(detail::driver().cuMemcpyDtoH(&got[s], output.handle() + static_cast<CUdeviceptr>(sample[s]) * 2, 2) ==
                CUDA_SUCCESS);
        // The output's (n, k, z, y, x) in d's layout.
        int64_t r = sample[s], n, k, z, y, x;
        if (d.layout == Layout::NCDHW) {
          x = r % o.w, r /= o.w, y = r % o.h, r /= o.h, z = r % o.d, r /= o.d, k = r % o.k, n = r / o.k;
        } else {
          k = r % o.k, r /= o.k, x = r % o.w, r /= o.w, y = r % o.h, r /= o.h, z = r % o.d, n = r / o.d;
        }
        double sum = d.bias ? bf16_to_float(bias[static_cast<size_t>(k)]) : 0.0;
        for (int64_t c = 0; c < d.c; ++c)
          for (int64_t a = 0; a < kd; ++a)
            for (int64_t b = 0; b < kh; ++b)
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t iz = z + a - pad, iy = y + b - pad, ix = x + e - pad;
                if (iz < 0 || iy < 0 || ix < 0 || iz >= d.d || iy >= d.h || ix >= d.w) continue;
                const int64_t w_at = d.layout == Layout::NCDHW ? (((k * d.c + c) * kd + a) * kh + b) * kw + e
                                                               : (((k * kd + a) * kh + b) * kw + e) * d.c + c;
                sum += static_cast<double>(bf16_to_float(weight[static_cast<size_t>(w_at)])) *
                       pattern_input(d, n, c, iz, iy, ix);
              }
        ref[s] = sum;
      }
      const Comparison c = compare(got.data(), DataType::BFloat16, ref.data(), static_cast<int64_t>(sample.size()), tolerance(d));
      INFO("sampled outputs: " << sample.size() << ", rel-L2 " << c.rel_l2 << ", non-finite " << c.non_finite);
      CHECK(c.non_finite == 0);
      CHECK(c.passed);
    }
  }
}

TEST_CASE("summary: the largest rel-L2 of each output class") {
  for (const auto& [cls, worst] : worst_rel_l2()) std::printf("worst rel-L2 %-48s %.3g\n", cls.c_str(), worst);
}

TEST_CASE("timing: the reference problem in bf16 and fp16", "[.][timing]") {
  cli::make_context_current();
  cli::Stream stream;
  struct Timed {
    std::string config;
    TypeCombo combo;
  };
  std::vector<Timed> runs;
  for (const TypeCombo& c : all_combos()) runs.push_back({"", c});
  for (const char* config : {"igemm:64,64", "igemm:128,32", "igemm:64,32", "igemm:128,128", "direct"})
    runs.push_back({config, {DataType::BFloat16, Layout::NCDHW, false}});
  for (const char* config : {"igemm:64,64", "direct"}) runs.push_back({config, {DataType::BFloat16, Layout::NDHWC, false}});
  for (const Timed& t : runs) {
    const Conv3dDesc d = typed(make(16, 3, {64, 64, 64}, 64, {3, 5, 7}), t.combo.type, t.combo.layout, t.combo.fp32_output);
    Engine& engine = test::engine_for(t.config);
    const cli::ProblemData data(d, 5);
    engine.run(d, data.tensors(), stream.get());
    stream.synchronize();
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) {
      cli::Event start, stop;
      start.record(stream);
      engine.run(d, data.tensors(), stream.get());
      stop.record(stream);
      stream.synchronize();
      ms.push_back(stop.since(start));
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    std::printf("timing %-16s %-40s %8.3f ms  %6.1f TFLOP/s  %s\n", t.config.empty() ? "auto" : t.config.c_str(),
                describe(d).c_str(), median, 2 * detail::make_problem(d).macs() / median * 1e-9,
                engine.kernel_for(d).c_str());
  }
}
