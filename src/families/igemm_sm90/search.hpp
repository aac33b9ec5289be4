#pragma once
// igemm_sm90's configuration search: the tile, channel chunk, staging and pitches of a problem,
// scored by the useful fraction of the padded work times measured speed factors.
#include <optional>
#include <utility>

#include "core/problem.hpp"
#include "igemm_sm90/geometry.cuh"
#include "plan/plan.hpp"

namespace conv3djit::detail {

// How a tile's input reaches shared memory, and the pitches and geometry that follow.
struct Sm90Staging {
  int tma;  // 1: one TMA box, stored densely; 0: cp.async, pitches chosen against bank conflicts
  int rp, pp, cp;
  Sm90Geometry g;
  double wavefronts;  // of the A gather per warp load (sm90_gather_wavefronts)
};

struct Sm90Choice {
  int th, tw, bn, cc;
  int row;                           // row tiles: the output width (0: TH x TW tiles)
  int pl;                            // output planes a tile
  Sm90Staging copies;                // always fits (across: the box, the only staging it has)
  std::optional<Sm90Staging> boxed;  // TMA, where it fits: then the kernel's
  double score = 0;                  // choose_sm90's useful fraction x warpgroup speed
  int across = 0;                    // tiles run on across images (sm90_across_tiles)
  const Sm90Staging& staging() const { return boxed ? *boxed : copies; }
};

/// The forced fields of a configuration (`--config igemm_sm90:...`): the search then keeps only
/// the tiles that match them, and refuses nothing its heuristic alone would refuse.
struct Sm90Filter {
  bool forced = false;
  std::optional<int> th, tw, bn, cc, tma, rows, planes, across;
  /// rows: 0 TH x TW tiles, 1 row tiles, or row tiles of that output width (the key's form).
  bool admits_row(int row) const { return !rows || (*rows <= 1 ? *rows == (row > 0 ? 1 : 0) : *rows == row); }
  bool admits(int th_, int tw_, int bn_, int cc_, int row, int pl, int across_ = 0) const {
    auto ok = [](const std::optional<int>& want, int v) { return !want || *want == v; };
    return ok(th, th_) && ok(tw, tw_) && ok(bn, bn_) && ok(cc, cc_) && admits_row(row) && ok(planes, pl) &&
           ok(across, across_);
  }
};

/// True where the kernel multiplies 3xTF32: float32 inputs in the fp32 class (sm90_split_of).
/// bf16 and fp16 inputs, exact in TF32, take one product.
bool sm90_split(const Problem& prob);

/// Whether a plan of prob in chunks of cc channels reads its weights raw by TMA (`tma`: its input
/// staged by TMA; sm90_raw_weights): then no igemm_sm90_weights step runs before it.
bool sm90_raw(const Problem& prob, int cc, bool tma);

/// Whether the heuristic leaves prob to direct_tiled for its few output channels (NCDHW, K < 16).
bool sm90_too_narrow(const Problem& prob);

/// One configuration with its staging, or nothing where it cannot run (staging 1: TMA boxes,
/// 0: cp.async, -1: TMA where it fits; half inputs are staged from their float32 copy either
/// way; rows: row tiles; pl: output planes a tile; across: tiles across images, TMA only).
std::optional<Sm90Choice> sm90_candidate(const Problem& prob, const DeviceLimits& limits, int th, int tw, int bn,
                                         int cc, int staging = -1, bool rows = false, int pl = 1,
                                         bool across = false);

/// Whether prob's tiles may run on across images (sm90_across_tiles): NCDHW, a 1 x 1 x 1 kernel
/// with unit strides and no padding, planned as planes of one output plane of 8 columns.
bool sm90_across_fits(const Problem& prob);

/// A pointwise layer with unit strides and no padding as one plane of its positions, w columns
/// wide (D = 1): nothing where it is no such layer or w does not divide its positions.
std::optional<Problem> sm90_flat_plane(const Problem& prob, int64_t w);

/// The best configuration for prob and the problem it plans: prob itself, or for a pointwise
/// layer with unit strides and no padding the same positions as one plane of another width.
std::optional<std::pair<Problem, Sm90Choice>> choose_sm90_shape(const Problem& prob, const DeviceLimits& limits,
                                                                 const Sm90Filter& filter = {});

/// Tiles of the whole output: (n, group of PL output planes) x a plane's tiles (across: TH-row
/// tiles of all N x OH rows).
long long sm90_tiles(const Problem& prob, int th, int tw, int row, int pl, bool across = false);

}  // namespace conv3djit::detail
