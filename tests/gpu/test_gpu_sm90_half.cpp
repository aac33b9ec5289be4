// GPU: igemm_sm90_half (bf16 / fp16 on wgmma, sm_90 only; NCDHW through channels_last copies; float32
// NDHWC in the tf32 class) against the float64 reference on fresh random data with NaN-poisoned
// outputs: the planner's tiles and forced ones, both output types, C and K that end mid-tile,
// mid-tile extents, padding and padding modes, strides and dilation, every activation with scaling
// and a residual, long reductions, grouped layers, chunks of 32 channels, inputs and weights off 16
// bytes; no local memory in any of its kernels. Passes without checking on GPUs other than sm_90.
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "config_cases.hpp"
#include "conv3djit/engine.hpp"
#include "conv3djit/reference.hpp"
#include "gpu_check.hpp"
#include "kernel_cases.hpp"

using namespace conv3djit;

namespace {

using test::make;

Conv3dDesc ndhwc(Conv3dDesc d, DataType type, bool fp32_output) {
  d.dtype = type;
  d.layout = Layout::NDHWC;
  d.fp32_output = fp32_output;
  return d;
}

// ndhwc() in layout l.
Conv3dDesc layout(Conv3dDesc d, DataType type, bool fp32_output, Layout l) {
  d = ndhwc(d, type, fp32_output);
  d.layout = l;
  return d;
}


using Case = test::KernelCase;
using test::family_of;
using test::worst_rel_l2;

// C and K past whole tiles (C = 72: a chunk of 64 and one of 8; K = 100, 300), mid-tile extents,
// stride and dilation, asymmetric padding, a pointwise layer.
std::vector<Conv3dDesc> shapes() {
  return {
      make(2, 72, {5, 8, 9}, 100, {3, 3, 3}, 1, 1, 1, 1, true),
      make(1, 64, {6, 9, 11}, 300, {3, 3, 3}, {1, 2, 1}, Padding::per_side({0, 1, 2}, {1, 0, 1}), {1, 1, 2}, 1, true),
      make(3, 128, {3, 7, 5}, 64, {1, 1, 1}, 1, 0, 1, 1, true),
      make(1, 40, {4, 10, 13}, 24, {2, 3, 3}, {2, 1, 1}, 1),
  };
}

// The last two stage A by the threads' copies where the others take im2col boxes.
const std::vector<std::string> kForced = {"",
                                          "igemm_sm90_half:64,64",
                                          "igemm_sm90_half:128,128,3",
                                          "igemm_sm90_half:128,256",
                                          "igemm_sm90_half:64,256,5",
                                          "igemm_sm90_half:128,192,4",
                                          "igemm_sm90_half:64,96",
                                          "igemm_sm90_half:128,128,3,0",
                                          "igemm_sm90_half:64,192,4,0"};

std::vector<Case> kernel_cases() {
  std::vector<Case> out;
  int i = 0;
  for (const DataType type : {DataType::BFloat16, DataType::Float16})
    for (const bool fp32_output : {false, true})
      for (const Conv3dDesc& d : shapes())
        for (const std::string& config : kForced) {
          if ((i++ % 2) != 0 && !config.empty()) continue;  // forced tiles on half the shapes
          // BN = 192 and 256 cannot keep the float32 outputs' partial sums apart (refused for C = 64, 72).
          if (fp32_output && (config.find(",256") != std::string::npos || config.find(",192") != std::string::npos) &&
              d.c < 128)
            continue;
          out.push_back({config, ndhwc(d, type, fp32_output)});
        }
  return out;
}

std::vector<Case> epilogue_cases() {
  std::vector<Case> out;
  int i = 0;
  for (Epilogue e : test::epilogue_cases()) {
    e.clamp_min = -3.f, e.clamp_max = 4.f;
    Conv3dDesc d = ndhwc(shapes()[0], i % 2 ? DataType::Float16 : DataType::BFloat16, i % 3 == 0);
    d.epilogue = e;
    out.push_back({"", d});
    Conv3dDesc r = d;
    r.epilogue.residual = true;
    out.push_back({i % 2 ? "igemm_sm90_half:128,128" : "", r});
    ++i;
  }
  // K a multiple of 8: the staged sums leave as 16-byte runs of channels (K = 100 above takes the
  // element path for half outputs), in the planner's tile and a 128 x 256 one.
  for (const int k : {64, 136}) {
    Conv3dDesc d = ndhwc(make(1, 64, {4, 6, 7}, k, {3, 3, 3}, 1, 1, 1, 1, true),
                         k == 64 ? DataType::BFloat16 : DataType::Float16, false);
    d.epilogue = test::epilogue_cases()[3];  // GELU, scaled
    d.epilogue.residual = true;
    out.push_back({"", d});
    out.push_back({"igemm_sm90_half:128,256", d});
  }
  return out;
}

std::vector<Case> padding_cases() {
  std::vector<Case> out;
  int i = 0;
  for (const PaddingMode mode : {PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular}) {
    for (const Conv3dDesc& base : {make(1, 64, {5, 7, 9}, 72, {3, 3, 3}, 1, Padding::per_side({1, 2, 1}, {0, 2, 1})),
                                   make(2, 48, {4, 6, 8}, 40, {3, 3, 3}, {1, 2, 1}, 1, 1, 1, true)}) {
      Conv3dDesc d = ndhwc(base, i % 2 ? DataType::Float16 : DataType::BFloat16, i % 3 == 0);
      d.padding_mode = mode;
      out.push_back({"", d});
      ++i;
    }
  }
  return out;
}

// Reductions of 13824 and 6912 terms: float32 outputs within 1e-5 need the blocked sums.
std::vector<Case> long_reduction_cases() {
  std::vector<Case> out;
  for (const DataType type : {DataType::BFloat16, DataType::Float16})
    for (const bool fp32_output : {false, true}) {
      out.push_back({"", ndhwc(make(1, 512, {4, 6, 7}, 136, {3, 3, 3}, 1, 1, 1, 1, true), type, fp32_output)});
      out.push_back({"igemm_sm90_half:64,128", ndhwc(make(1, 256, {3, 5, 6}, 64, {3, 3, 3}, 1, 1), type, fp32_output)});
    }
  return out;
}

// NCDHW layers: the channels_last copies of input and weight (whole and partial 64 x 64 tiles; the
// input's as TMA boxes where its planes lie on 16 bytes: 360, 168 and 108 positions),
// the NCDHW store of both output types through shared memory (16-byte runs, and one element a
// thread where planes are off 16 bytes and tiles cross images), the residual read in NCDHW, a
// padding mode, a long reduction.
std::vector<Case> ncdhw_cases() {
  std::vector<Case> out;
  int i = 0;
  auto ncdhw = [](Conv3dDesc d) {
    d.layout = Layout::NCDHW;
    return d;
  };
  for (const Conv3dDesc& d : shapes()) {
    const DataType type = i % 2 ? DataType::Float16 : DataType::BFloat16;
    out.push_back({"", ncdhw(ndhwc(d, type, i % 3 == 1))});
    out.push_back({i % 2 ? "igemm_sm90_half:128,256" : "igemm_sm90_half:64,64", ncdhw(ndhwc(d, type, i % 3 == 2))});
    ++i;
  }
  Conv3dDesc r = ncdhw(ndhwc(shapes()[0], DataType::BFloat16, false));
  r.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  r.epilogue.residual = true;
  out.push_back({"", r});
  r.fp32_output = true;
  out.push_back({"igemm_sm90_half:128,128", r});
  // Planes of 105 positions: off 16 bytes, tiles across images.
  Conv3dDesc odd = ncdhw(ndhwc(shapes()[2], DataType::Float16, false));
  odd.epilogue = r.epilogue;
  out.push_back({"", odd});
  Conv3dDesc m = ncdhw(ndhwc(make(2, 48, {4, 6, 8}, 40, {3, 3, 3}, {1, 2, 1}, 1, 1, 1, true), DataType::Float16, false));
  m.padding_mode = PaddingMode::Reflect;
  out.push_back({"", m});
  out.push_back({"", ncdhw(ndhwc(make(1, 512, {4, 6, 7}, 136, {3, 3, 3}, 1, 1, 1, 1, true), DataType::BFloat16, true))});
  out.push_back({"", ncdhw(ndhwc(make(2, 96, {3, 6, 6}, 48, {3, 3, 3}, 1, 1), DataType::Float16, false))});
  return out;
}

// NCDHW layers of KD x 1 x 1 windows read in M-major boxes straight from the input: planes that end mid-tile
// (240 positions: 128 + 112; 64 of a 128-row tile), C past whole chunks (72), K mid-tile, both
// output types, 64-row tiles, the residual (through the staged rows, also with 256 columns and a
// float32 output).
std::vector<Case> mmajor_cases() {
  auto ncdhw = [](Conv3dDesc d, DataType type, bool fp32_output) {
    d = ndhwc(d, type, fp32_output);
    d.layout = Layout::NCDHW;
    return d;
  };
  const Conv3dDesc a = make(2, 72, {3, 8, 10}, 100, {1, 1, 1}, 1, 0, 1, 1, true);
  const Conv3dDesc b = make(3, 128, {2, 4, 8}, 64, {1, 1, 1});
  std::vector<Case> out = {
      // (The planner gives a to gemm_sm90, b of 64 output channels to this family.)
      {"igemm_sm90_half", ncdhw(a, DataType::BFloat16, false)},
      {"igemm_sm90_half", ncdhw(a, DataType::Float16, true)},
      {"", ncdhw(b, DataType::Float16, false)},
      {"igemm_sm90_half:64,128", ncdhw(a, DataType::BFloat16, false)},
      {"igemm_sm90_half:128,256", ncdhw(b, DataType::BFloat16, true)},
  };
  Conv3dDesc r = ncdhw(a, DataType::BFloat16, false);
  r.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  r.epilogue.residual = true;
  out.push_back({"", r});
  // The residual through float32 rows in the ring: fp16 with a 256-column tile, and a float32
  // output.
  Conv3dDesc wide = ncdhw(b, DataType::Float16, false);
  wide.epilogue = r.epilogue;
  out.push_back({"igemm_sm90_half:128,256", wide});
  Conv3dDesc wide32 = ncdhw(b, DataType::BFloat16, true);
  wide32.epilogue = r.epilogue;
  out.push_back({"", wide32});
  // Windows along D (the boxes start whole planes away at each tap, zeros past the image's
  // planes): padding 1 on both sides with C past whole chunks, causal padding (4 before, none
  // after) with dilation 2, padding after only, three frames giving one (a video VAE's
  // temporal convolution) with 192 columns and the residual, and a 64-row tile.
  const Conv3dDesc t = make(2, 72, {5, 8, 10}, 100, {3, 1, 1}, 1, Dims3{1, 0, 0}, 1, 1, true);
  const Conv3dDesc causal = make(1, 128, {6, 4, 6}, 64, {3, 1, 1}, 1, Padding::per_side({4, 0, 0}, {0, 0, 0}), {2, 1, 1});
  const Conv3dDesc after = make(2, 64, {4, 6, 4}, 48, {2, 1, 1}, 1, Padding::per_side({0, 0, 0}, {1, 0, 0}));
  const Conv3dDesc frames = make(1, 128, {3, 12, 16}, 192, {3, 1, 1}, 1, 0, 1, 1, true);
  out.push_back({"", ncdhw(t, DataType::BFloat16, false)});
  out.push_back({"", ncdhw(t, DataType::Float16, true)});
  out.push_back({"", ncdhw(causal, DataType::Float16, false)});
  out.push_back({"", ncdhw(causal, DataType::BFloat16, true)});
  out.push_back({"", ncdhw(after, DataType::BFloat16, false)});
  Conv3dDesc vae = ncdhw(frames, DataType::BFloat16, false);
  vae.epilogue = r.epilogue;
  out.push_back({"igemm_sm90_half:128,192,4", vae});
  out.push_back({"igemm_sm90_half:64,128", ncdhw(t, DataType::Float16, false)});
  // A stride along D (each box in one output plane): planes of two boxes, a last tile whose second
  // box lies past the output, dilation with causal padding.
  const Conv3dDesc strided = make(2, 72, {7, 8, 16}, 100, {3, 1, 1}, {2, 1, 1}, Dims3{1, 0, 0}, 1, 1, true);
  const Conv3dDesc half_tile = make(1, 64, {7, 8, 8}, 64, {3, 1, 1}, {2, 1, 1});
  const Conv3dDesc dilated = make(1, 128, {9, 4, 16}, 96, {3, 1, 1}, {2, 1, 1}, Padding::per_side({4, 0, 0}, {0, 0, 0}),
                                  {2, 1, 1});
  out.push_back({"", ncdhw(strided, DataType::BFloat16, false)});
  out.push_back({"", ncdhw(half_tile, DataType::Float16, true)});
  out.push_back({"", ncdhw(dilated, DataType::BFloat16, false)});
  out.push_back({"igemm_sm90_half:64,64", ncdhw(strided, DataType::Float16, false)});
  return out;
}

// Grouped layers, a block's columns in one group: 32 channels a group (A by the threads' copies)
// and 64 (im2col boxes from channel group * 64), a group's K past whole column blocks (40, 100)
// and odd (33: single stores), both layouts and output types, an epilogue with the residual, a
// padding mode, strides, pointwise and temporal NCDHW layers in M-major boxes, forced 128- and
// 256-column tiles wider than a group.
std::vector<Case> grouped_cases() {
  const Conv3dDesc a = make(2, 64, {4, 6, 9}, 80, {3, 3, 3}, 1, 1, 1, 2, true);              // 32 -> 40
  const Conv3dDesc b = make(1, 256, {3, 5, 7}, 200, {3, 3, 3}, {1, 2, 1}, 1, 1, 4, true);    // 64 -> 50
  const Conv3dDesc c = make(2, 128, {3, 6, 5}, 66, {2, 3, 3}, 1, Dims3{1, 0, 1}, {1, 2, 1}, 2);  // 64 -> 33
  const Conv3dDesc pw = make(2, 192, {2, 4, 8}, 300, {1, 1, 1}, 1, 0, 1, 3, true);            // 64 -> 100
  std::vector<Case> out;
  int i = 0;
  for (const Layout l : {Layout::NDHWC, Layout::NCDHW})
    for (const Conv3dDesc& d : {a, b, c, pw}) {
      const DataType type = i % 2 ? DataType::Float16 : DataType::BFloat16;
      out.push_back({"", layout(d, type, false, l)});
      // 256 columns cannot keep a long reduction's float32 partial sums apart.
      const bool fp32_output = i % 3 == 0;
      out.push_back({i % 2 || fp32_output ? "igemm_sm90_half:128,128" : "igemm_sm90_half:64,256",
                     layout(d, type, fp32_output, l)});
      ++i;
    }
  for (const Layout l : {Layout::NDHWC, Layout::NCDHW}) {
    Conv3dDesc r = layout(b, DataType::BFloat16, l == Layout::NCDHW, l);
    r.epilogue = test::epilogue_cases()[3];  // GELU, scaled
    r.epilogue.residual = true;
    out.push_back({"", r});
    Conv3dDesc m = layout(a, DataType::Float16, false, l);
    m.padding_mode = PaddingMode::Reflect;
    out.push_back({"", m});
  }
  // A temporal window in M-major boxes from channel group * 64 (64 -> 50 a group).
  const Conv3dDesc t = make(2, 192, {4, 4, 8}, 150, {3, 1, 1}, 1, Dims3{1, 0, 0}, 1, 3, true);
  out.push_back({"", layout(t, DataType::Float16, false, Layout::NCDHW)});
  out.push_back({"igemm_sm90_half:64,128", layout(t, DataType::BFloat16, true, Layout::NCDHW)});
  return out;
}

// Float32 layers in the tf32 class: NDHWC ones of the shapes above (C = 72: a chunk of 32 channels
// twice and one of 8; C = 40 past a chunk), a long reduction (C = 256, 6912 terms), forced tiles
// and the threads' copies, an epilogue with the residual, a padding mode, grouped layers with
// boxes (32 a group) and with copies (48 a group); NCDHW ones forced through the channels_last
// copies, with and without im2col boxes of the copy, and with an epilogue, and a grouped one that
// the planner sends there.
std::vector<Case> tf32_cases() {
  auto tf32 = [](Conv3dDesc d) {
    d.layout = Layout::NDHWC;
    d.precision = Precision::Tf32;
    return d;
  };
  std::vector<Case> out;
  int i = 0;
  for (const Conv3dDesc& d : shapes())
    for (const std::string& config : kForced) {
      // The planner leaves fewer than 64 output channels to igemm_sm90: those are forced only.
      const bool sampled = (i++ % 3) == 0;
      if (config.empty() ? d.k >= 64 : sampled) out.push_back({config, tf32(d)});
    }
  out.push_back({"", tf32(make(1, 256, {4, 10, 12}, 96, {3, 3, 3}, 1, 1, 1, 1, true))});
  Conv3dDesc e = tf32(shapes()[0]);
  e.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  e.epilogue.residual = true;
  out.push_back({"", e});
  out.push_back({"igemm_sm90_half:128,256,4,0", e});
  Conv3dDesc m = tf32(shapes()[1]);
  m.padding_mode = PaddingMode::Circular;
  out.push_back({"", m});
  out.push_back({"", tf32(make(2, 64, {4, 6, 9}, 80, {3, 3, 3}, 1, 1, 1, 2, true))});
  out.push_back({"", tf32(make(1, 96, {3, 5, 7}, 64, {3, 3, 3}, {1, 2, 1}, 1, 1, 2, true))});
  // NCDHW through the channels_last copies (forced: the planner leaves them to igemm_sm90).
  for (const std::string& config : {"igemm_sm90_half:128,128", "igemm_sm90_half:64,64,3,0"}) {
    for (const Conv3dDesc& d : {shapes()[0], shapes()[2]}) {
      Conv3dDesc n = tf32(d);
      n.layout = Layout::NCDHW;
      out.push_back({config, n});
    }
  }
  Conv3dDesc ne = e;
  ne.layout = Layout::NCDHW;
  out.push_back({"igemm_sm90_half:128,256,4", ne});
  Conv3dDesc grouped = tf32(make(2, 64, {4, 6, 9}, 80, {3, 3, 3}, 1, 1, 1, 2, true));  // the planner's pick
  grouped.layout = Layout::NCDHW;
  out.push_back({"", grouped});
  // A wide NCDHW layer with 16384 output positions: the planner's pick.
  Conv3dDesc wide = tf32(make(1, 256, {4, 64, 64}, 256, {3, 3, 3}, 1, 1, 1, 1, true));
  wide.layout = Layout::NCDHW;
  out.push_back({"", wide});
  return out;
}

// Chunks of 32 channels in 64-byte rows: the planner's for 32 channels a group in NDHWC (float32
// outputs with blocked sums, epilogues with the residual staged in a ring grown to hold them, a
// wide tile) and grouped layers, forced on NCDHW layers (which igemm_sm90 takes: through the copy,
// a 64-row tile, the threads' copies for a padding mode, an epilogue), and forced on other C: 96
// (three chunks a tap), 40 (a last chunk of 8 from boxes), 72 by the threads' copies.
std::vector<Case> chunk32_cases() {
  std::vector<Case> out;
  const Conv3dDesc base = make(2, 32, {5, 8, 9}, 64, {3, 3, 3}, 1, 1);
  out.push_back({"", ndhwc(base, DataType::BFloat16, false)});
  Conv3dDesc n = base;
  n.dtype = DataType::BFloat16;
  out.push_back({"igemm_sm90_half:128,64", n});
  out.push_back({"igemm_sm90_half:64,64", n});
  out.push_back({"", ndhwc(make(2, 128, {4, 6, 7}, 100, {3, 3, 3}, 1, 1, 1, 4, true), DataType::Float16, false)});
  out.push_back({"", ndhwc(make(1, 32, {6, 9, 11}, 100, {3, 3, 3}, {1, 2, 1}, Padding::per_side({0, 1, 2}, {1, 0, 1}),
                                {1, 1, 2}, 1, true),
                           DataType::Float16, true)});
  out.push_back({"igemm_sm90_half:128,256,8", ndhwc(make(1, 32, {4, 7, 9}, 300, {3, 3, 3}, 1, 1, 1, 1, true),
                                                    DataType::BFloat16, false)});
  Conv3dDesc m = base;
  m.dtype = DataType::Float16;
  m.padding_mode = PaddingMode::Replicate;
  out.push_back({"igemm_sm90_half:128,64", m});
  for (const Layout l : {Layout::NDHWC, Layout::NCDHW}) {
    Conv3dDesc r = ndhwc(make(2, 32, {3, 6, 7}, 128, {3, 3, 3}, 1, 1, 1, 1, true), DataType::BFloat16, false);
    r.layout = l;
    r.epilogue = test::epilogue_cases()[3];  // GELU, scaled
    r.epilogue.residual = true;
    out.push_back({l == Layout::NCDHW ? "igemm_sm90_half:128,128" : "", r});
  }
  out.push_back({"igemm_sm90_half:128,128,6,1,0,32", ndhwc(make(1, 96, {4, 6, 7}, 80, {3, 3, 3}, 1, 1), DataType::BFloat16, false)});
  out.push_back({"igemm_sm90_half:64,64,6,1,0,32", ndhwc(make(2, 40, {4, 5, 6}, 48, {2, 3, 3}, 1, 1), DataType::Float16, false)});
  out.push_back({"igemm_sm90_half:128,96,4,0,0,32", ndhwc(shapes()[0], DataType::BFloat16, true)});
  return out;
}

// Output channels as the products' M (pn: 128 or 256 positions a warpgroup's N, BN = 64): chunks
// of 32 and 64 channels, C past whole chunks (40, 72), K below and past a column block (24, 100,
// 300), mid-tile extents, stride and dilation, both output types (float32 ones of a long reduction
// keep blocked sums at pn = 128), every store path (NDHWC's staged rows, NCDHW's 16-byte runs and
// its element path on planes off 16 bytes), the epilogue with a residual, A by the threads' copies
// (im2col 0 and a padding mode), one warpgroup of 128 or 256 positions and two of 128.
std::vector<Case> channels_as_m_cases() {
  const Layout C = Layout::NCDHW, N = Layout::NDHWC;
  const DataType B = DataType::BFloat16, H = DataType::Float16;
  Conv3dDesc epi = layout(make(2, 32, {5, 8, 9}, 64, {3, 3, 3}, 1, 1, 1, 1, true), B, false, N);
  epi.epilogue = test::epilogue_cases()[3];  // GELU, scaled
  epi.epilogue.residual = true;
  Conv3dDesc epi_ncdhw = epi;
  epi_ncdhw.layout = C;
  epi_ncdhw.dtype = H;
  Conv3dDesc reflect = layout(make(2, 48, {4, 6, 8}, 40, {3, 3, 3}, {1, 2, 1}, 1, 1, 1, true), H, false, N);
  reflect.padding_mode = PaddingMode::Reflect;
  return {
      {"igemm_sm90_half:256,64,4,1,0,32,128", layout(make(2, 32, {5, 8, 9}, 64, {3, 3, 3}, 1, 1), B, false, N)},
      {"igemm_sm90_half:256,64,4,1,0,32,256", layout(make(2, 32, {5, 8, 9}, 64, {3, 3, 3}, 1, 1), H, false, C)},
      {"igemm_sm90_half:128,64,3,1,0,64,128", layout(shapes()[0], B, false, N)},
      {"igemm_sm90_half:256,64,3,1,0,64,256", layout(shapes()[0], H, false, C)},
      {"igemm_sm90_half:256,64,4,1,0,64,128", layout(shapes()[1], B, true, N)},
      {"igemm_sm90_half:256,64,4,1,0,64,256", layout(shapes()[1], H, false, C)},
      {"igemm_sm90_half:256,64,3,1,0,64,256", layout(shapes()[2], H, true, C)},  // planes of 105 positions
      {"igemm_sm90_half:256,64,3,0,0,64,256", layout(shapes()[3], B, false, N)},
      {"igemm_sm90_half:256,64,3,0,0,64,128", layout(shapes()[3], H, true, C)},
      {"igemm_sm90_half:256,64,4,1,0,64,128", layout(make(1, 256, {3, 5, 6}, 64, {3, 3, 3}, 1, 1), B, true, N)},
      {"igemm_sm90_half:256,64,4,1,0,32,256", epi},
      {"igemm_sm90_half:256,64,4,1,0,32,128", epi_ncdhw},
      {"igemm_sm90_half:256,64,3,0,0,64,256", reflect},
      // The planner's pick at 48 channels (128 blocks of 256 positions), K mid-tile.
      {"", layout(make(2, 48, {8, 32, 64}, 40, {3, 3, 3}, 1, 1, 1, 1, true), B, false, C)},
  };
}

// Every case's kernel must come from igemm_sm90_half.
void check_all(std::vector<Case> cases, bool both_ranges) {
  for (Case& c : cases) c.family = "igemm_sm90_half";
  test::check_cases(cases, both_ranges);
}

// check_all, each case's kernel carrying `field` (" mmajor=1": the staging the cases are about), or
// with present false, none carrying it.
void check_all_with(const std::vector<Case>& cases, const char* field, bool present = true) {
  cli::Stream stream;
  for (const Case& c : cases) {
    const KernelResources r = test::engine_for(c.config).resources(c.desc, stream.get());
    INFO(r.kernel);
    CHECK((r.kernel.find(field) != std::string::npos) == present);
  }
  check_all(cases, true);
}

bool on_sm90() {
  cli::make_context_current();
  cli::Stream stream;
  const Conv3dDesc d = ndhwc(shapes()[0], DataType::BFloat16, false);
  return family_of(Engine::global().kernel_for(d)) == "igemm_sm90_half";
}

}  // namespace

TEST_CASE("igemm_sm90_half: the planner's and forced tiles match the float64 reference") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all(kernel_cases(), true);
}

TEST_CASE("igemm_sm90_half: every activation with scaling, with and without the residual") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all(epilogue_cases(), false);
}

TEST_CASE("igemm_sm90_half: padding modes") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all(padding_cases(), true);
}

TEST_CASE("igemm_sm90_half: long reductions meet the float32-output class") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all(long_reduction_cases(), false);
}

TEST_CASE("igemm_sm90_half: NCDHW layers through channels_last copies") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all(ncdhw_cases(), true);
}

TEST_CASE("igemm_sm90_half: NCDHW layers of KD x 1 x 1 windows read their input in M-major boxes") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all_with(mmajor_cases(), " mmajor=1");
}

TEST_CASE("igemm_sm90_half: grouped layers, each block's columns in one group") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all(grouped_cases(), true);
}

TEST_CASE("igemm_sm90_half: chunks of 32 channels in 64-byte rows") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all_with(chunk32_cases(), " chunk=32");
}

TEST_CASE("igemm_sm90_half: output channels as the products' M, positions as their N") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all_with(channels_as_m_cases(), " pn=0", false);  // the planner's case must take pn too
}

TEST_CASE("igemm_sm90_half: float32 layers in the tf32 class") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  check_all(tf32_cases(), true);
}

TEST_CASE("igemm_sm90_half: inputs off a 16-byte boundary run the twin that copies A by the threads") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  cli::Stream stream;
  std::random_device seeds;
  for (const DataType type : {DataType::BFloat16, DataType::Float16}) {
    Conv3dDesc pointwise = mmajor_cases()[2].desc;  // the planner's (64 output channels)
    pointwise.dtype = type;
    std::vector<Conv3dDesc> descs = {ndhwc(shapes()[0], type, type == DataType::Float16),
                                     ndhwc(shapes()[1], type, type == DataType::Float16), pointwise,
                                     ndhwc(chunk32_cases()[0].desc, type, false)};
    if (type == DataType::BFloat16) descs.push_back(tf32_cases()[0].desc);  // float32 in the tf32 class, once
    for (const Conv3dDesc& d : descs) {
      DYNAMIC_SECTION(describe(d)) {
        const KernelResources aligned = Engine::global().resources(d, stream.get(), true);
        const KernelResources twin = Engine::global().resources(d, stream.get(), false);
        INFO(aligned.kernel << " / " << twin.kernel);
        const bool mmajor = d.layout == Layout::NCDHW;
        CHECK(aligned.kernel.find(mmajor ? " mmajor=1" : " im2col=1") != std::string::npos);
        CHECK(twin.kernel.find(mmajor ? " mmajor=0" : " im2col=0") != std::string::npos);
        const test::GpuCheck r = test::check_against_reference(Engine::global(), d, seeds(), stream, nullptr, {}, 1);
        INFO("rel-L2 " << r.comparison.rel_l2 << ", non-finite " << r.comparison.non_finite);
        CHECK(r.comparison.non_finite == 0);
        CHECK(r.comparison.passed);
      }
    }
  }
}

TEST_CASE("igemm_sm90_half: weights off a 16-byte boundary stage B by the threads' copies") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  // No map holds such a weight (weight_boxes): 128- and 64-byte rows, 96 columns over the
  // 64-row passes of 64-byte rows, a wide tile, tf32; NCDHW's weight step reads it element-wise.
  cli::Stream stream;
  std::random_device seeds;
  const Conv3dDesc ncdhw_layer = chunk32_cases()[1].desc;
  const std::vector<Case> cases = {
      {"", ndhwc(shapes()[0], DataType::BFloat16, false)},
      {"igemm_sm90_half:128,256,4", ndhwc(shapes()[1], DataType::Float16, false)},
      {"igemm_sm90_half:128,96,3,1,0,32", chunk32_cases()[0].desc},
      {"igemm_sm90_half:64,64,3,0,0,32", ndhwc(shapes()[3], DataType::Float16, true)},
      {"", tf32_cases()[0].desc},
      {"igemm_sm90_half:128,64", ncdhw_layer},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.config << " " << describe(c.desc)) {
      const test::GpuCheck r =
          test::check_against_reference(test::engine_for(c.config), c.desc, seeds(), stream, nullptr, {}, 0, 1);
      INFO(r.kernel << ": rel-L2 " << r.comparison.rel_l2 << ", non-finite " << r.comparison.non_finite);
      CHECK(family_of(r.kernel) == "igemm_sm90_half");
      CHECK(r.comparison.non_finite == 0);
      CHECK(r.comparison.passed);
    }
  }
}

TEST_CASE("igemm_sm90_half: no local memory") {
  if (!on_sm90()) return;  // igemm_sm90_half needs compute capability 9.0
  std::vector<Case> all = kernel_cases();
  for (const auto& list :
       {epilogue_cases(), padding_cases(), long_reduction_cases(), ncdhw_cases(), mmajor_cases(), grouped_cases(),
        tf32_cases(), chunk32_cases()})
    all.insert(all.end(), list.begin(), list.end());
  test::check_no_local_memory(all);
}

TEST_CASE("igemm_sm90_half: summary of the largest rel-L2 of each output class") {
  for (const auto& [cls, worst] : worst_rel_l2()) std::printf("worst rel-L2 %-48s %.3g\n", cls.c_str(), worst);
}
