#pragma once
// igemm_sm90's configuration: the named fields of its key, in key order (one table for the key,
// the traits, `--config` and its help).
#include "plan/family.hpp"

namespace conv3djit::detail {

struct Sm90Config {
  int th, tw, bn, cc;  // tile rows x columns (or positions of row tiles), output channels, chunk channels
  int rp, pp, cp;      // input tile pitches: row, plane, channel (floats)
  int tma;             // 1: TMA boxes, 0: cp.async
  int rows;            // row tiles: the output width; 0: TH x TW tiles
  int planes;          // output planes a tile
  int parity;          // the TMA box shift's parity, for paired loads (0 where there are none)
  int across;          // 1: a pointwise layer's tiles run on from one image into the next
};

inline const ConfigTable<Sm90Config, 12> kSm90Table{{{
    {{"th", FieldRole::Chosen, "tile rows (row tiles: TH x 64 positions); TH x TW a multiple of 64 up to 256"},
     &Sm90Config::th},
    {{"tw", FieldRole::Chosen, "tile columns, a multiple of 8"}, &Sm90Config::tw},
    {{"bn", FieldRole::Chosen, "output channels a block: 32, 64, 128 or 256 (256: tf32 class or half types)"},
     &Sm90Config::bn},
    {{"cc", FieldRole::Chosen, "input channels a chunk of the reduction (capped at C)"}, &Sm90Config::cc},
    {{"rp", FieldRole::Derived, "input tile row pitch (floats)"}, &Sm90Config::rp},
    {{"pp", FieldRole::Derived, "input tile plane pitch (floats)"}, &Sm90Config::pp},
    {{"cp", FieldRole::Derived, "input tile channel pitch (floats)"}, &Sm90Config::cp},
    {{"tma", FieldRole::Optional, "staging: 1 TMA boxes (dilation[D] <= 8, boxes within 256; padding modes "
                                  "other than zeros: W % 4 == 0, half types or NDHWC), 0 cp.async; default TMA where "
                                  "it fits"}, &Sm90Config::tma},
    {{"rows", FieldRole::Optional, "1 (or the output width, the key's form): row tiles, TH x TW consecutive "
                                   "positions of an output plane; default 0"}, &Sm90Config::rows},
    {{"planes", FieldRole::Optional, "output planes a tile: 1, or 2-3 in the tf32 class or for half types with BN "
                                     "64, CC = C, unit stride and dilation along D, KD >= PLANES and zero padding; "
                                     "default 1"}, &Sm90Config::planes},
    {{"parity", FieldRole::Derived, "parity of the TMA box shift, for paired input loads"}, &Sm90Config::parity},
    {{"across", FieldRole::Optional, "1: tiles of a pointwise NCDHW layer (unit strides, no padding) planned as "
                                     "planes 8 positions wide run on across images: TW 8, TMA; default 0"},
     &Sm90Config::across},
}}};

}  // namespace conv3djit::detail
