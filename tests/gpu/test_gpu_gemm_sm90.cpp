// GPU: gemm_sm90 (pointwise bf16 / fp16 NCDHW layers as warp-specialised, persistent GEMMs, sm_90
// only; the planner's choice and forced, as tuning offers it) against the float64 reference on fresh random data with
// NaN-poisoned outputs: every tile width and rings of 2 stages up to the most that fit, output
// channels, input channels and positions that end mid-tile, blocks that walk many tiles (the
// ring's phases wrap across tiles), tiles of 128 and 256 output channels, warpgroups sharing tiles
// or taking every other one, both output types, every activation with scaling and a residual,
// inputs off 16 bytes (the twin), outputs off a pair's alignment, and no local memory; float32
// layers in the tf32 class (the input as A from registers) with both tile heights, a 72-channel
// reduction (a chunk of zeros evens the count), epilogues and offsets; NDHWC layers of every type
// (the batch's rows as one GEMM, rows and channels ending mid-tile, K odd) with both tile widths,
// epilogues and offsets; layers of 3-D windows, strides, dilations and zero padding through im2col
// boxes, NDHWC and NCDHW (channels-last copies, output positions ending mid-run, 64-channel split
// tiles). Passes without checking on GPUs other than sm_90.
#include <string>
#include <vector>

#include "catch.hpp"
#include "config_cases.hpp"
#include "conv3djit/engine.hpp"
#include "gpu_check.hpp"
#include "kernel_cases.hpp"

using namespace conv3djit;

namespace {

using test::make;
using Case = test::KernelCase;

Conv3dDesc typed(Conv3dDesc d, DataType type, bool fp32_output) {
  d.dtype = type;
  d.fp32_output = fp32_output;
  return d;
}

// K = 100 and 300 (tiles of 128 channels ending mid-tile), C = 72 (a chunk of 64 and one of 8),
// D·H·W = 120 and 200 (tiles of every width ending mid-tile), and a layer of 512 tiles of 128
// positions (each block walks several; the ring wraps across them).
std::vector<Conv3dDesc> shapes() {
  return {
      make(2, 72, {3, 5, 8}, 100, {1, 1, 1}, 1, 0, 1, 1, true),
      make(3, 64, {2, 10, 10}, 300, {1, 1, 1}, 1, 0, 1, 1, true),
      make(2, 128, {16, 32, 32}, 256, {1, 1, 1}, 1, 0, 1, 1, false),
  };
}

std::vector<Case> width_cases() {
  std::vector<Case> out;
  int i = 0;
  for (const DataType type : {DataType::BFloat16, DataType::Float16})
    for (const bool fp32_output : {false, true})
      for (const Conv3dDesc& d : shapes())
        for (const std::string config :
             {"gemm_sm90", "gemm_sm90:128,64", "gemm_sm90:128,96", "gemm_sm90:128,112", "gemm_sm90:128,128,2",
              "gemm_sm90:128,192", "gemm_sm90:128,256,3", "gemm_sm90:256,112", "gemm_sm90:256,128,2",
              "gemm_sm90:256,96", "gemm_sm90:bm=128,bn=112,split=1", "gemm_sm90:bm=128,bn=64,stages=4,split=1"}) {
          if ((i++ % 2) != 0 && config != "gemm_sm90") continue;  // other widths on half the combinations
          out.push_back({config, typed(d, type, fp32_output), "gemm_sm90"});
        }
  return out;
}

std::vector<Case> epilogue_cases() {
  std::vector<Case> out;
  int i = 0;
  for (Epilogue e : test::epilogue_cases()) {
    e.clamp_min = -3.f, e.clamp_max = 4.f;
    Conv3dDesc d = typed(shapes()[i % 2], i % 2 ? DataType::Float16 : DataType::BFloat16, i % 3 == 0);
    d.epilogue = e;
    out.push_back({"gemm_sm90", d, "gemm_sm90"});
    d.epilogue.residual = true;
    out.push_back({i % 2 ? "gemm_sm90:128,112" : "gemm_sm90:bm=128,bn=128,split=1", d, "gemm_sm90"});
    ++i;
  }
  return out;
}

// Output channels fewer than the planner's 64 and input channels fewer than its 32: forced, the
// tiles are mostly the boxes' zeros, which the stores skip.
std::vector<Case> narrow_cases() {
  return {{"gemm_sm90:128,128",
           typed(make(1, 8, {4, 4, 4}, 24, {1, 1, 1}, 1, 0, 1, 1, true), DataType::BFloat16, false), "gemm_sm90"},
          {"gemm_sm90:128,64,2", typed(make(2, 16, {1, 3, 8}, 8, {1, 1, 1}), DataType::Float16, true), "gemm_sm90"}};
}

// The tf32 class: every shape at the heuristic's tile, 128 x 128 with a 2-stage ring and 256 x 128,
// and the heaviest epilogues.
Conv3dDesc tf32(Conv3dDesc d) {
  d.dtype = DataType::Float32;
  d.precision = Precision::Tf32;
  return d;
}

std::vector<Case> tf32_cases() {
  std::vector<Case> out;
  for (const Conv3dDesc& d : shapes()) {
    for (const std::string config : {"gemm_sm90", "gemm_sm90:128,128,2", "gemm_sm90:256,128"}) {
      out.push_back({config, tf32(d), "gemm_sm90"});
    }
  }
  const std::vector<Epilogue> epilogues = test::epilogue_cases();
  for (const int e : {3, 5, 6}) {  // GELU and SiLU with the residual, sigmoid; scaled
    Conv3dDesc d = tf32(shapes()[e % 2]);
    d.epilogue = epilogues[e];
    out.push_back({e == 5 ? "gemm_sm90:256,128" : "gemm_sm90", d, "gemm_sm90"});
  }
  return out;
}

// NDHWC: bf16, fp16 with float32 outputs and tf32; D·H·W = 105 (no multiple of 8), K = 100 and 99
// (odd: pairs and quads of channels off their alignment), every tile and the heaviest epilogues.
std::vector<Case> ndhwc_cases() {
  std::vector<Case> out;
  std::vector<Conv3dDesc> descs;
  for (const DataType type : {DataType::BFloat16, DataType::Float16, DataType::Float32}) {
    for (const int64_t k : {int64_t{100}, int64_t{99}}) {
      Conv3dDesc d = make(3, 72, {3, 5, 7}, k, {1, 1, 1}, 1, 0, 1, 1, true);
      d = type == DataType::Float32 ? tf32(d) : typed(d, type, type == DataType::Float16);
      d.layout = Layout::NDHWC;
      descs.push_back(d);
    }
  }
  for (const Conv3dDesc& d : descs) {
    for (const std::string config : {"gemm_sm90", "gemm_sm90:128,128,2", "gemm_sm90:128,256", "gemm_sm90:256,128"}) {
      out.push_back({config, d, "gemm_sm90"});
    }
  }
  const std::vector<Epilogue> epilogues = test::epilogue_cases();
  for (const int e : {3, 4, 5}) {  // GELU with the residual, tanh GELU, SiLU with the residual; scaled
    for (const Conv3dDesc& base : {descs[0], descs[3], descs[4]}) {
      Conv3dDesc d = base;
      d.epilogue = epilogues[e];
      out.push_back({"gemm_sm90:128,256", d, "gemm_sm90"});
    }
  }
  return out;
}

// NDHWC layers through the im2col boxes (forced; the planner keeps igemm_sm90_half): 3 x 3 x 3
// with C = 72 (a tap's chunk of 64 and one of 8, whose weight columns reach into the next tap's
// and meet the box's zeros), K = 100 and 99, extents no tile divides, stride 2, dilation 2,
// causal padding along D and per-side padding, a padded 1 x 1 x 1 window, fp16 with float32
// outputs (a reduction of 864 terms), every tile, and SiLU with the residual.
std::vector<Case> windowed_cases() {
  auto ndhwc = [](Conv3dDesc d, DataType type, bool fp32_output) {
    d = typed(d, type, fp32_output);
    d.layout = Layout::NDHWC;
    return d;
  };
  const Conv3dDesc plain = ndhwc(make(2, 72, {5, 9, 11}, 100, {3, 3, 3}, 1, 1, 1, 1, true), DataType::BFloat16, false);
  std::vector<Case> out;
  for (const std::string config : {"gemm_sm90", "gemm_sm90:128,128,2", "gemm_sm90:128,256", "gemm_sm90:256,128"}) {
    out.push_back({config, plain, "gemm_sm90"});
  }
  const std::vector<Conv3dDesc> others = {
      ndhwc(make(3, 72, {6, 10, 13}, 99, {3, 3, 3}, {2, 2, 2}, 1, 1, 1, true), DataType::Float16, false),  // strided
      ndhwc(make(1, 64, {7, 12, 12}, 130, {3, 3, 3}, 1, 2, {2, 2, 2}), DataType::BFloat16, false),          // dilated
      ndhwc(make(2, 40, {6, 8, 10}, 64, {3, 3, 3}, 1, Padding::per_side({2, 1, 0}, {0, 1, 2}), 1, 1, true),
            DataType::BFloat16, false),  // causal along D, per side along H and W
      ndhwc(make(2, 32, {4, 9, 7}, 100, {3, 3, 3}, 1, 1, 1, 1, true), DataType::Float16, true),  // float32 out
      ndhwc(make(2, 64, {3, 5, 7}, 128, {1, 1, 1}, 1, 1), DataType::BFloat16, false),             // padded 1x1x1
      ndhwc(make(1, 96, {3, 20, 24}, 192, {3, 1, 1}, 1, Dims3{1, 0, 0}, 1, 1, true), DataType::BFloat16, false),
  };
  for (const Conv3dDesc& d : others) out.push_back({"gemm_sm90:128,128", d, "gemm_sm90"});
  Conv3dDesc fused = plain;
  fused.epilogue.activation = Activation::Silu;
  fused.epilogue.residual = true;
  out.push_back({"gemm_sm90:128,256", fused, "gemm_sm90"});
  out.push_back({"gemm_sm90:128,128", others[3], "gemm_sm90"});
  // NCDHW through the channels-last copies: OD·OH·OW = 495 (runs of four positions end mid-way),
  // every tile and split, 64-channel tiles a warpgroup's whole, float32 outputs (odd P: pairs off
  // their alignment), SiLU with the residual, a pointwise layer of D·H·W = 105 and the strided one.
  auto ncdhw = [](Conv3dDesc d) {
    d.layout = Layout::NCDHW;
    return d;
  };
  for (const std::string config : {"gemm_sm90:128,256", "gemm_sm90:bm=64,bn=256,split=1",
                                   "gemm_sm90:bm=128,bn=128,split=1", "gemm_sm90:256,128"}) {
    out.push_back({config, ncdhw(plain), "gemm_sm90"});
  }
  out.push_back({"gemm_sm90:128,128", ncdhw(others[3]), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=192,split=1", ncdhw(fused), "gemm_sm90"});
  out.push_back({"gemm_sm90", typed(make(2, 64, {3, 7, 5}, 96, {1, 1, 1}), DataType::Float16, false), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=128,split=1", ncdhw(others[0]), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=256,split=1",
                 typed(make(2, 32, {6, 10, 12}, 64, {3, 3, 3}, 1, 1), DataType::BFloat16, false), "gemm_sm90"});
  // Row boxes (a kernel row's taps on one box, rows of OW + (KW - 1)·DW whose overhang the stores
  // drop; OW = 11 and 9 end runs of four mid-row): both layouts, dilation 2, causal and per-side
  // padding, float32 outputs, every tile shape.
  out.push_back({"gemm_sm90:bm=128,bn=256,rowbox=1", plain, "gemm_sm90"});
  for (const int i : {1, 2, 3}) out.push_back({"gemm_sm90:bm=128,bn=128,rowbox=1", others[i], "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=192,split=1,rowbox=1", ncdhw(plain), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=128,bn=256,rowbox=1", ncdhw(others[3]), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=128,split=1,rowbox=1", ncdhw(others[1]), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=128,split=1,rowbox=1", ncdhw(others[2]), "gemm_sm90"});
  // Chunks of 32 and 16 channels (64- and 32-byte rows, as swizzled): C = 72 (a tap's last chunk of
  // 8, its weight columns reaching into the next tap's), 64, 40 and 32, both layouts, with and
  // without row boxes, split tiles, stride 2, dilation 2, causal padding, float32 outputs, the
  // residual.
  out.push_back({"gemm_sm90:bm=128,bn=256,chunk=32", plain, "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=128,bn=256,rowbox=1,chunk=16", plain, "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=128,bn=128,rowbox=1,chunk=16", others[1], "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=128,bn=128,chunk=16", others[2], "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=128,bn=128,rowbox=1,chunk=32", others[3], "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=192,split=1,rowbox=1,chunk=32", ncdhw(plain), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=128,bn=128,split=1,chunk=32", ncdhw(others[0]), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=128,bn=256,chunk=16", ncdhw(others[2]), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=128,split=1,rowbox=1,chunk=16", ncdhw(others[3]), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=192,split=1,chunk=32", ncdhw(fused), "gemm_sm90"});
  out.push_back({"gemm_sm90:bm=64,bn=256,split=1,rowbox=1,chunk=32",
                 typed(make(2, 32, {6, 10, 12}, 64, {3, 3, 3}, 1, 1), DataType::BFloat16, false), "gemm_sm90"});
  return out;
}

bool on_sm90() {
  cli::make_context_current();
  const Conv3dDesc d = typed(shapes()[0], DataType::BFloat16, false);
  return test::family_of(Engine::global().kernel_for(d)) == "gemm_sm90";  // the planner's choice there
}

}  // namespace

TEST_CASE("gemm_sm90: the heuristic's and every forced width match the float64 reference") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  test::check_cases(width_cases(), true);
}

TEST_CASE("gemm_sm90: every activation with scaling, with and without the residual") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  test::check_cases(epilogue_cases(), false);
}

TEST_CASE("gemm_sm90: the tf32 class matches the float64 reference") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  test::check_cases(tf32_cases(), true);
}

TEST_CASE("gemm_sm90: tf32 inputs off 16 bytes run igemm_sm90, outputs off 8 bytes an element at a time") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  cli::Stream stream;
  Engine& engine = test::engine_for("gemm_sm90");
  Conv3dDesc d = tf32(shapes()[1]);
  d.epilogue.activation = Activation::Silu;
  d.epilogue.residual = true;
  CHECK(test::family_of(engine.resources(d, stream.get(), false).kernel) == "igemm_sm90");
  test::check_offsets(engine, d, 1, 0, 0);
  test::check_offsets(engine, d, 0, 0, 1, "gemm_sm90");
}

TEST_CASE("gemm_sm90: NDHWC layers match the float64 reference") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  test::check_cases(ndhwc_cases(), true);
}

TEST_CASE("gemm_sm90: NDHWC inputs off 16 bytes run igemm_sm90_half, outputs off their alignment one at a time") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  cli::Stream stream;
  Engine& engine = test::engine_for("gemm_sm90");
  for (const Conv3dDesc& base : {ndhwc_cases()[0].desc, ndhwc_cases()[16].desc}) {  // bf16, tf32
    Conv3dDesc d = base;
    d.epilogue.activation = Activation::Silu;
    d.epilogue.residual = true;
    DYNAMIC_SECTION(describe(d)) {
      CHECK(test::family_of(engine.resources(d, stream.get(), false).kernel) == "igemm_sm90_half");
      test::check_offsets(engine, d, 1, 0, 0);
      test::check_offsets(engine, d, 0, 0, 1, "gemm_sm90");
    }
  }
}

TEST_CASE("gemm_sm90: layers of any window through im2col boxes, both layouts, match the float64 reference") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  test::check_cases(windowed_cases(), true);
}

TEST_CASE("gemm_sm90: windowed NDHWC inputs off 16 bytes run igemm_sm90_half, NCDHW ones the copy") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  cli::Stream stream;
  Engine& engine = test::engine_for("gemm_sm90:128,128");
  for (const Layout layout : {Layout::NDHWC, Layout::NCDHW}) {
    Conv3dDesc d = windowed_cases().front().desc;
    d.layout = layout;
    d.epilogue.activation = Activation::Silu;
    d.epilogue.residual = true;
    DYNAMIC_SECTION(describe(d)) {
      // NDHWC: the twin's plan for an input off 16 bytes; NCDHW: the map reads the aligned copy.
      CHECK(test::family_of(engine.resources(d, stream.get(), false).kernel) ==
            (layout == Layout::NDHWC ? "igemm_sm90_half" : "gemm_sm90"));
      test::check_offsets(engine, d, 1, 0, 0, layout == Layout::NCDHW ? "gemm_sm90" : "");
      test::check_offsets(engine, d, 0, 1, 1, "gemm_sm90");
    }
  }
}

TEST_CASE("im2col boxes: the same input under another padding after W gets a map of its own") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  // Both im2col families keep a thread's last input map while the tensor, key, input extents and
  // padding before each axis stay; the padding after W moves the map's last window origin.
  cli::Stream stream;
  const Conv3dDesc a = windowed_cases().front().desc;  // NDHWC bf16, 3 x 3 x 3, padding 1
  Conv3dDesc b = a;
  b.padding = Padding::per_side({1, 1, 1}, {1, 1, 0});  // one output column fewer
  for (const std::string config : {"gemm_sm90:128,128", "gemm_sm90:bm=128,bn=128,rowbox=1", "igemm_sm90_half"}) {
    DYNAMIC_SECTION(config) {
      Engine& engine = test::engine_for(config);
      cli::ProblemData first(a, 5), second(b, 5);
      REQUIRE(first.input == second.input);
      engine.run(a, first.tensors(), stream.get());
      Conv3dTensors tensors = second.tensors();
      tensors.input = first.tensors().input;  // the tensor the layer before read
      engine.run(b, tensors, stream.get());
      stream.synchronize();
      const std::vector<float> got = second.output();
      const std::vector<double> ref = cli::reference_output(engine, b, second, stream, false);
      const Comparison r = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tolerance(b));
      INFO(engine.kernel_for(b) << ": rel-L2 " << r.rel_l2 << ", non-finite " << r.non_finite);
      CHECK(r.passed);
    }
  }
}

TEST_CASE("gemm_sm90: tiles mostly past the layer's channels") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  test::check_cases(narrow_cases(), true);
}

TEST_CASE("gemm_sm90: inputs off a 16-byte boundary run igemm_sm90_half's twin, weights off one a copy") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  cli::Stream stream;
  Engine& engine = test::engine_for("gemm_sm90");
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    const Conv3dDesc d = typed(shapes()[0], type, type == DataType::Float16);
    DYNAMIC_SECTION(describe(d)) {
      CHECK(test::family_of(engine.resources(d, stream.get(), false).kernel) == "igemm_sm90_half");
      test::check_offsets(engine, d, 1, 0, 0);
      test::check_offsets(engine, d, 0, 1, 0, "gemm_sm90");
    }
  }
}

TEST_CASE("gemm_sm90: outputs and residuals off a pair's alignment are stored an element at a time") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  for (const bool fp32_output : {false, true}) {
    Conv3dDesc d = typed(shapes()[1], DataType::BFloat16, fp32_output);
    d.epilogue.activation = Activation::Silu;
    d.epilogue.residual = true;
    DYNAMIC_SECTION(describe(d)) { test::check_offsets(test::engine_for("gemm_sm90"), d, 0, 0, 1, "gemm_sm90"); }
  }
}

TEST_CASE("gemm_sm90: no local memory") {
  if (!on_sm90()) return;  // gemm_sm90 needs compute capability 9.0
  std::vector<Case> all = width_cases();
  for (const auto& list : {epilogue_cases(), narrow_cases(), tf32_cases(), ndhwc_cases(), windowed_cases()}) {
    all.insert(all.end(), list.begin(), list.end());
  }
  test::check_no_local_memory(all);
}

TEST_CASE("gemm_sm90: summary of the largest rel-L2 of each output class") {
  for (const auto& [cls, worst] : test::worst_rel_l2()) std::printf("worst rel-L2 %-48s %.3g\n", cls.c_str(), worst);
}
