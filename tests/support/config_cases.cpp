#include "config_cases.hpp"

#include <random>

namespace conv3djit::test {

Conv3dDesc make(int64_t n, int64_t c, Dims3 in, int64_t k, Dims3 kernel, Dims3 stride, Padding pad, Dims3 dil,
                int64_t groups, bool bias) {
  Conv3dDesc d;
  d.n = n; d.c = c; d.d = in.d; d.h = in.h; d.w = in.w; d.k = k;
  d.kernel = kernel; d.stride = stride; d.padding = pad; d.dilation = dil; d.groups = groups; d.bias = bias;
  return d;
}

std::vector<Conv3dDesc> pair_load_cases() {
  std::vector<Conv3dDesc> cases = {
      make(2, 3, {9, 20, 32}, 40, {3, 5, 7}, 1, 1, 1, 1, true),    // odd
      make(1, 3, {6, 17, 32}, 64, {3, 5, 7}),                      // even
      make(1, 3, {5, 12, 36}, 16, {3, 5, 7}, 1, Padding::same()),  // odd (pad_w 3)
      make(1, 8, {5, 9, 20}, 24, {3, 3, 3}, 1, 1, 1, 1, true),     // odd
      // Even KW: odd output widths, so TH x TW tiles only.
      make(1, 3, {5, 9, 20}, 24, {3, 5, 4}, 1, 1, 1, 1, true),     // odd
      make(1, 3, {5, 9, 24}, 24, {3, 5, 4}),                       // even
  };
  for (Conv3dDesc& d : cases) d.precision = Precision::Tf32;
  return cases;
}

ConfigCases config_cases() {
  // Tiles that end mid-row and mid-column, K not a multiple of the block, single and chunked
  // channel staging, both thread widths, strides and dilations.
  const std::vector<Conv3dDesc> dense = {
      make(2, 3, {9, 13, 37}, 13, {3, 5, 7}),
      make(1, 8, {6, 11, 21}, 20, {3, 3, 3}, {1, 2, 2}, 1, 1, 1, true),
      make(1, 5, {7, 12, 19}, 9, {2, 3, 3}, 1, Padding::same(), {2, 1, 2}),
      make(1, 48, {4, 7, 9}, 70, {3, 3, 3}, 1, 1, 1, 1, true),  // C * 27 > 1024: chunked
      make(1, 512, {5, 6, 7}, 9, {3, 3, 3}, 1, 1, 1, 1, true),  // 13824-term reduction
  };
  // W and padding[W] multiples of 4: the tiled kernel's 16-byte input copies (V = 4), with a tile
  // that starts left of the input (padding 4), strides, dilation, a chunked reduction.
  const std::vector<Conv3dDesc> dense_aligned = {
      make(2, 3, {5, 21, 68}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
      make(1, 8, {6, 11, 20}, 20, {3, 3, 3}, {1, 2, 2}, Dims3{1, 1, 0}, 1, 1, true),
      make(1, 5, {7, 12, 24}, 9, {2, 3, 3}, 1, Dims3{1, 2, 4}, {1, 1, 2}),
      make(1, 48, {4, 7, 12}, 70, {3, 3, 3}, 1, Dims3{1, 1, 0}, 1, 1, true),
  };
  std::vector<Conv3dDesc> dense_tf32 = dense;
  for (Conv3dDesc& d : dense_tf32) d.precision = Precision::Tf32;
  std::vector<Conv3dDesc> grouped = {
      make(2, 16, {5, 19, 70}, 16, {3, 3, 3}, 1, 1, 1, 16, true),        // depthwise, W > 64
      make(1, 12, {6, 9, 13}, 24, {3, 3, 3}, {1, 2, 2}, 1, 1, 12),        // channel multiplier 2
      make(1, 16, {7, 10, 23}, 8, {1, 3, 5}, 1, Dims3{0, 2, 1}, {1, 2, 1}, 4),  // grouped, dilated
      make(1, 6, {4, 33, 17}, 9, {2, 2, 3}, {2, 1, 2}, Padding::valid(), 1, 3, true),
  };
  // OW % 4 == 0: the grouped kernel's 16-byte stores.
  const std::vector<Conv3dDesc> grouped_aligned = {
      make(2, 16, {6, 11, 24}, 16, {3, 3, 3}, 1, 1, 1, 16, true),
      make(1, 8, {5, 12, 32}, 16, {3, 3, 3}, {2, 2, 2}, Dims3{1, 0, 2}, 1, 8),
      make(1, 12, {7, 9, 20}, 6, {3, 3, 5}, 1, Padding::same(), {2, 1, 1}, 3, true),
  };
  // Several channels of a group per block: 8 (ResNeXt-like, K not a multiple of the tile's
  // planes), 2 and 4 channels per group with strides and valid padding.
  const std::vector<Conv3dDesc> grouped_multi = {
      make(1, 16, {5, 10, 30}, 32, {3, 3, 3}, 1, 1, 1, 4, true),
      make(1, 12, {6, 9, 13}, 24, {3, 3, 3}, {1, 2, 2}, 1, 1, 12),
      make(1, 6, {4, 33, 17}, 12, {2, 2, 3}, {2, 1, 2}, Padding::valid(), 1, 3, true),
  };
  // The depthwise kernel (one channel per group, unit stride in D and W): every shift of the W
  // tile (padding mod 4 = 1, 2, 0, 3), rows that are not 16-byte multiples (W = 70, 30: element
  // loads), OW % 4 != 0 (element stores), a channel multiplier with stride and dilation in H,
  // 7 taps along W (two halo lanes), dilated D and W, a single plane (KD = 1).
  const std::vector<Conv3dDesc> depthwise = {
      grouped[0],
      grouped_aligned[0],
      make(1, 8, {7, 13, 36}, 16, {2, 3, 5}, {1, 2, 1}, Dims3{1, 0, 2}, {1, 2, 1}, 8, true),
      make(1, 4, {3, 10, 40}, 4, {1, 3, 3}, 1, 0, 1, 4),
      make(1, 6, {5, 9, 30}, 6, {2, 2, 7}, 1, Dims3{0, 1, 3}, 1, 6, true),
      make(2, 4, {9, 8, 20}, 4, {3, 3, 3}, 1, Padding::same(), {2, 1, 2}, 4),
  };
  // 7 x 7 planes, whose loops the grouped kernel rolls (grouped/geometry.cuh): a depthwise
  // 7 x 7 x 7 layer and 4 channels a group of a 2 x 7 x 7 one.
  const std::vector<Conv3dDesc> grouped_large = {
      make(1, 8, {9, 12, 21}, 8, {7, 7, 7}, 1, 3, 1, 8, true),
      make(1, 16, {4, 13, 22}, 16, {2, 7, 7}, 1, Dims3{0, 3, 3}, 1, 4),
  };
  // A long group reduction (64 channels x 27 taps) through the kernel's per-channel partial sums.
  const std::vector<Conv3dDesc> grouped_long = {make(1, 128, {4, 5, 9}, 4, {3, 3, 3}, 1, 1, 1, 2, true)};
  // Grouped layers on the tiled kernel (K / groups a multiple of 8: a block's channels in one
  // group): 16 and 8 channels a group, a stride, a dilation, 5 x 5 x 5 in chunks of channels, the
  // last group's tiles ending mid-row.
  const std::vector<Conv3dDesc> grouped_tiled = {
      make(1, 32, {5, 11, 21}, 32, {3, 3, 3}, 1, 1, 1, 2, true),
      make(1, 24, {6, 12, 20}, 48, {3, 3, 3}, 1, 2, 2, 3),
      make(1, 16, {6, 9, 13}, 16, {3, 3, 5}, {1, 2, 1}, Dims3{1, 1, 2}, 1, 2),
      make(1, 64, {4, 7, 12}, 32, {5, 5, 5}, 1, 2, 1, 4, true),
  };
  // 16 channels a group of K: two warps of 8.
  const std::vector<Conv3dDesc> grouped_tiled_16 = {grouped_tiled[0], grouped_tiled[1]};
  // Half tensors, converted as they are staged: bf16, fp16, and bf16 with a float32 output.
  std::vector<Conv3dDesc> grouped_tiled_half = {grouped_tiled[0], grouped_tiled[2], grouped_tiled[3]};
  grouped_tiled_half[0].dtype = DataType::BFloat16;
  grouped_tiled_half[1].dtype = DataType::Float16;
  grouped_tiled_half[2].dtype = DataType::BFloat16;
  grouped_tiled_half[2].fp32_output = true;
  // igemm_sm90 with the whole reduction in shared memory (CC >= C): short reductions. Outputs that
  // end mid-tile in W and H, K below, at and above the 32/64/128-column blocks (2 blocks of 128),
  // padding terms in the last slice (C * KVOL % 8 != 0), strides, dilation, pointwise.
  std::vector<Conv3dDesc> short_reduction = {
      dense[0], dense[1], dense[2],
      make(2, 3, {5, 21, 70}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
      make(1, 24, {3, 9, 30}, 130, {1, 1, 1}, 1, 0, 1, 1, true),
      make(1, 3, {6, 23, 29}, 40, {1, 7, 7}, {1, 2, 2}, Dims3{0, 3, 3}),
      make(1, 7, {5, 12, 17}, 17, {3, 3, 3}, 1, 2, 2),
  };
  std::vector<Conv3dDesc> short_reduction_tf32 = short_reduction;
  for (Conv3dDesc& d : short_reduction_tf32) d.precision = Precision::Tf32;
  // A network's output head: 1 to 3 output channels, most of a block's 8 masked (pointwise with
  // 16-byte copies, padded, strided), in both classes and bf16.
  std::vector<Conv3dDesc> heads = {
      make(2, 32, {6, 10, 20}, 2, {1, 1, 1}, 1, 0, 1, 1, true),
      make(1, 24, {5, 9, 13}, 3, {3, 3, 3}, 1, 1, 1, 1, true),
      make(1, 16, {4, 7, 11}, 1, {3, 3, 3}, {1, 2, 2}, 1),
  };
  for (size_t i = 0; i < 3; ++i) {
    Conv3dDesc d = heads[i];
    if (i == 2) d.dtype = DataType::BFloat16;
    else d.precision = Precision::Tf32;
    heads.push_back(d);
  }
  // 64-column tiles of 3 rows: all but the strided C = 8 problem (its 129-column input rows don't fit).
  std::vector<Conv3dDesc> big_tiles = short_reduction;
  big_tiles.erase(big_tiles.begin() + 1);
  // 128-column blocks: the 3xTF32 weights of 128 channels fit for reductions up to ~200 terms.
  const std::vector<Conv3dDesc> wide = {short_reduction[2], short_reduction[4], short_reduction[5]};
  std::vector<Conv3dDesc> wide_tf32 = {short_reduction[0], short_reduction[2], short_reduction[4], short_reduction[5]};
  for (Conv3dDesc& d : wide_tf32) d.precision = Precision::Tf32;
  // Chunks of 2 channels with 128 columns: partial last chunk (C = 7), strides, pointwise.
  const std::vector<Conv3dDesc> chunked_wide = {short_reduction[1], short_reduction[4], short_reduction[6]};
  // igemm_sm90 with TMA staging (W % 4 == 0): every box shift (padding along W of 0, 3, 2, 1 columns
  // mod 4), strides, dilation (along D: the box's traversal stride), whole and chunked reductions (chunks past C read the
  // box's out-of-bounds zeros), pointwise, K around the column blocks, outputs ending mid-tile.
  const std::vector<Conv3dDesc> tma = {
      make(2, 3, {5, 21, 68}, 64, {3, 5, 7}, 1, 0, 1, 1, true),
      make(1, 8, {6, 11, 20}, 20, {3, 3, 3}, {1, 2, 2}, 1, 1, 1, true),
      make(1, 5, {7, 12, 24}, 9, {2, 3, 3}, 1, Dims3{1, 2, 2}),
      make(1, 7, {5, 12, 16}, 17, {3, 3, 3}, 1, Dims3{0, 1, 3}),
      make(1, 48, {4, 7, 12}, 70, {3, 3, 3}, 1, 1, 1, 1, true),
      make(1, 4, {6, 13, 28}, 24, {3, 3, 3}, 1, 2, {1, 2, 2}),
      make(1, 6, {9, 10, 20}, 16, {3, 3, 3}, 1, Dims3{2, 1, 1}, {2, 1, 1}, 1, true),  // dilation along D
      make(1, 24, {3, 9, 32}, 130, {1, 1, 1}, 1, 0, 1, 1, true),
  };
  std::vector<Conv3dDesc> tma_tf32 = tma;
  for (Conv3dDesc& d : tma_tf32) d.precision = Precision::Tf32;
  // 128 columns with chunks of 2: all but the 3 x 5 x 7 kernel (its 3xTF32 chunk weights don't fit).
  const std::vector<Conv3dDesc> tma_wide(tma.begin() + 1, tma.end());
  // 256 columns (tf32 class only): K from 9 to 130 in one block; the whole reduction where its
  // weights fit (not the 3 x 5 x 7 kernel's), chunks of 2 read by TMA.
  const std::vector<Conv3dDesc> wide_256(wide_tf32.begin() + 1, wide_tf32.end());
  const std::vector<Conv3dDesc> tma_wide_tf32(tma_tf32.begin() + 1, tma_tf32.end());
  // Row tiles with TMA: all but the strided C = 8 problem (runs of 128 positions of its 10-wide
  // rows span 14 of them: its input tile does not fit).
  std::vector<Conv3dDesc> tma_rows = {tma[0]};
  tma_rows.insert(tma_rows.end(), tma.begin() + 2, tma.end());
  std::vector<Conv3dDesc> tma_rows_tf32 = tma_rows;
  for (Conv3dDesc& d : tma_rows_tf32) d.precision = Precision::Tf32;
  // Two and three output planes a tile (tf32, one chunk, unit stride and dilation along D): an odd
  // OD (the last tile's second plane is past the output), KD = 2 and 3, padding along D, padding
  // slots in each kd's last slice, K below and at the column block.
  std::vector<Conv3dDesc> planes_tf32 = {tma[0], tma[2], tma[3], tma[5]};
  for (Conv3dDesc& d : planes_tf32) d.precision = Precision::Tf32;
  // Paired rows loading their inputs in pairs (sm90_pair_loads): both parities of the box shift
  // (pad_w 1 and 3: odd; 0: even), 3 x 5 x 1 boxes in two groups and 8 x 1 x 1 boxes in one, KW
  // odd and even (the last translate aligned or alone), K below BN, an odd OD, tiles ending
  // mid-row. test_plan checks each one's parity.
  const std::vector<Conv3dDesc> pair_loads_tf32 = pair_load_cases();
  const std::vector<Conv3dDesc> pair_loads_rows_tf32(pair_loads_tf32.begin(), pair_loads_tf32.begin() + 4);
  // Paired rows without pair loads: stride and dilation 2 along W (translates two columns apart),
  // 17 outputs a row.
  std::vector<Conv3dDesc> carried_tf32 = {make(1, 3, {5, 9, 40}, 24, {3, 5, 4}, {1, 1, 2}, 0, {1, 1, 2})};
  carried_tf32[0].precision = Precision::Tf32;
  // TMA boxes of a pitched copy (W % 4 != 0: rows of 40, 12, 20 floats): tiles and row tiles, a
  // chunked reduction, a stride, box shifts of padding 0, 1, 3 along W, and two planes a tile.
  const std::vector<Conv3dDesc> pitched = {dense[0], dense[1], dense[3], make(1, 7, {5, 12, 18}, 17, {3, 3, 3}, 1, Dims3{0, 1, 3})};
  const std::vector<Conv3dDesc> pitched_rows = {dense[0], dense[3], pitched[3]};
  std::vector<Conv3dDesc> pitched_planes_tf32 = {dense[0], pitched[3]};
  for (Conv3dDesc& d : pitched_planes_tf32) d.precision = Precision::Tf32;
  std::vector<Conv3dDesc> chunked_wide_tf32 = chunked_wide;
  for (Conv3dDesc& d : chunked_wide_tf32) d.precision = Precision::Tf32;
  // Tiles across images (pointwise, planned as planes 8 wide): 15 rows an image, so that every
  // tile but the last crosses into the next image (a box a row) and the last runs past the last
  // image (one box, rows of zeros beyond); images of 3 rows (a tile spans six, the first tile's
  // last row past the fifth image); K past the column block; chunks of 32 with a last one of 8
  // channels past C (72), and one chunk (C = 16: the warps run apart).
  const std::vector<Conv3dDesc> across = {
      make(3, 64, {2, 6, 10}, 40, {1, 1, 1}, 1, 0, 1, 1, true),
      make(5, 72, {1, 3, 8}, 70, {1, 1, 1}),
      make(2, 16, {4, 4, 6}, 24, {1, 1, 1}, 1, 0, 1, 1, true),
  };
  std::vector<Conv3dDesc> across_tf32 = across;
  for (Conv3dDesc& d : across_tf32) d.precision = Precision::Tf32;
  // ... and half inputs of at most 32 channels (igemm_sm90 reads their float32 copy): bf16 and
  // fp16 outputs, and float32 ones.
  std::vector<Conv3dDesc> across_half = {make(3, 24, {2, 6, 10}, 40, {1, 1, 1}, 1, 0, 1, 1, true), across[2], across[2]};
  across_half[0].dtype = DataType::BFloat16;
  across_half[1].dtype = DataType::Float16;
  across_half[2].dtype = DataType::BFloat16;
  across_half[2].fp32_output = true;
  // Weights read raw (tf32, streamed chunks of whole rows of 32 terms, TMA): 3 x 3 taps in chunks
  // of 32 channels, the second chunk 16 channels short (C = 48), K past the column block.
  std::vector<Conv3dDesc> raw_weights_tf32 = {make(1, 48, {4, 9, 12}, 40, {1, 3, 3}, 1, Dims3{0, 1, 1}, 1, 1, true),
                                              make(2, 64, {3, 7, 10}, 70, {3, 1, 1}, 1, Dims3{1, 0, 0})};
  for (Conv3dDesc& d : raw_weights_tf32) d.precision = Precision::Tf32;
  return ConfigCases{
      {
          {"generic", dense},
          {"generic", grouped},
          {"generic:1", dense},
          {"generic:8", grouped},
          {"tiled:8,1,4,1,8", dense},
          {"tiled:1,1,32,2,4", dense},
          {"tiled:3,1,1,3,8", dense},
          {"tiled:2,2,8,1,4", dense},
          {"tiled:4,2,4,3,8", dense},
          {"tiled:1,8,2,2,4", dense},
          {"tiled:2,4,2,4,4", dense},
          {"tiled:8,1,4,1,8", dense_aligned},
          {"tiled:1,1,32,2,4", dense_aligned},
          {"tiled:4,2,4,3,8", dense_aligned},
          {"tiled:2,4,2,4,4", dense_aligned},
          {"tiled:8,1,4,3,8,1", dense_aligned},
          {"tiled:4,2,4,3,8,4,1", dense_aligned},  // one team with resident weights (2 by default)
          {"tiled:2,4,2,4,4,1,1", dense},
          {"tiled:1,4,4,2,8", grouped_tiled},
          {"tiled:1,8,2,2,4", grouped_tiled},
          {"tiled:2,2,8,3,4", grouped_tiled_16},
          {"tiled:1,8,2,2,4", grouped_tiled_half},
          {"tiled:2,2,4,4,8,4", {make(1, 32, {4, 9, 24}, 32, {3, 3, 3}, 1, Dims3{1, 1, 4}, 1, 2, true)}},
          {"grouped:8,64,2,4,4", grouped},
          {"grouped:8,32,2,4,16,1,4", grouped},
          {"grouped:6,16,3,4,5,1,1", grouped},
          {"grouped:5,24,1,4,3", grouped},
          {"grouped:6,16,3,2,16", grouped},
          {"grouped:4,12,1,3,1", grouped},
          {"grouped:8,128,4,4,64", grouped},
          {"grouped:4,32,1,4,2,2", grouped_multi},
          {"grouped:4,16,1,4,2,8", {grouped_multi[0]}},
          {"grouped:4,16,1,4,3,8,3", {grouped_multi[0]}},
          {"grouped:2,8,1,4,1,2", grouped_long},
          {"grouped:16,32,4,4,1", grouped_large},             // the depth loop rolled
          {"grouped:8,32,2,4,1,4", {grouped_large[1]}},       // the row loop too
          {"grouped:8,64,2,4,4", grouped_aligned},
          {"grouped:5,24,1,4,3", grouped_aligned},
          {"grouped:8,32,2,4,16,1,4", grouped_aligned},
          {"depthwise:2,16,2,4", depthwise},
          {"depthwise:1,12,3,3", depthwise},
          {"depthwise:3,8,3,2", {depthwise[0], depthwise[1], depthwise[3], depthwise[4]}},
          {"depthwise:2,16,2,9", {depthwise[0], depthwise[1], depthwise[5]}},  // runs that loop
          {"igemm:128,64", dense},
          {"igemm:64,32", dense},
          {"igemm:32,128", dense},
          {"igemm:128,64", dense_tf32},
          {"sm90:3,64,64,512", big_tiles},
          {"sm90:8,8,32,512", short_reduction},
          {"sm90:8,8,32,512", short_reduction_tf32},
          {"sm90:4,32,128,512", wide},
          {"sm90:2,32,64,512", short_reduction_tf32},
          {"sm90:8,16,128,512", wide_tf32},
          {"sm90:4,32,256,512", wide_256},
          {"sm90:2,64,256,2,1", tma_wide_tf32},
          // tf32 chunks through 4 stages without a drain between items, staged by cp.async: 2 and
          // 3 wgmma groups an item (C = 5; C = 48 and 512), besides 2 stages (C = 8) and resident.
          {"sm90:4,32,128,3,0", dense_tf32},
          {"sm90:2,64,64,4", dense},
          {"sm90:8,16,32,3", dense_tf32},
          {"sm90:2,64,128,2", chunked_wide},
          {"sm90:2,64,64,4,1", tma},
          {"sm90:2,64,64,4,1", tma_tf32},
          {"sm90:2,64,128,2,1", tma_wide},
          {"sm90:4,32,64,3,0", tma},
          // Row tiles (runs of TH x TW positions of a plane): ending mid-row and mid-plane, with
          // TMA and cp.async, whole and chunked reductions, both classes.
          {"sm90:2,64,64,4,1,1", tma_rows},
          {"sm90:4,64,64,3,1,1", tma_rows_tf32},
          {"sm90:4,32,64,3,0,1", short_reduction},
          {"sm90:2,64,128,2,0,1", chunked_wide_tf32},
          {"sm90:2,64,128,2,1,1", chunked_wide},  // 128 columns in row tiles: the planner's c3d_conv3b
          {"sm90:4,64,64,512,1,1,2", planes_tf32},
          {"sm90:2,64,64,4,1", pitched},
          {"sm90:2,64,64,4,1,1", pitched_rows},
          {"sm90:4,64,64,512,1,1,2", pitched_planes_tf32},
          {"sm90:2,64,64,512,0,0,2", planes_tf32},
          {"sm90:2,32,64,512,1,0,3", {planes_tf32[0], planes_tf32[2]}},
          // Two planes by cp.async (unpaired) with an odd output width.
          {"sm90:2,64,64,512,0,0,2", {dense_tf32[0]}},
          {"sm90:4,64,64,512,0,1,2", {dense_tf32[0]}},
          // Paired rows (sm90_paired) with an odd output width, carrying their inputs (stride 2):
          // TH x TW tiles store position by position at the right edge; row tiles of an odd width
          // do not pair.
          {"sm90:2,64,64,512,1,0,2", carried_tf32},
          {"sm90:4,64,64,512,1,1,2", carried_tf32},
          {"sm90:4,64,64,512,1,1,2", pair_loads_rows_tf32},
          {"sm90:2,64,64,512,1,0,2", pair_loads_tf32},
          {"sm90:16,8,64,32,1,0,1,1", across},
          {"sm90:16,8,64,32,1,0,1,1", across_tf32},
          {"sm90:32,8,64,16,1,0,1,1", across},   // 4 warpgroups
          {"sm90:16,8,256,32,1,0,1,1", {across_tf32[1]}},  // 256 columns (tf32 only)
          {"sm90:16,8,64,32,1,0,1,1", across_half},
          {"sm90:2,64,64,32,1", raw_weights_tf32},
          {"sm90:2,64,32,32,1", raw_weights_tf32},
      },
      {dense, grouped, grouped_multi, grouped_aligned, grouped_tiled, depthwise, dense_tf32, short_reduction,
       short_reduction_tf32, tma, tma_tf32, heads}};
}

std::vector<Epilogue> epilogue_cases() {
  std::vector<Epilogue> out;
  for (int a = 0; a <= static_cast<int>(Activation::Clamp); ++a) {
    Epilogue e;
    e.activation = static_cast<Activation>(a);
    e.alpha = 0.75f;
    e.gamma = 1.25f;
    e.slope = 0.2f;
    e.clamp_min = -0.3f;
    e.clamp_max = 0.4f;
    e.residual = a % 2 == 1;
    e.beta = -0.5f;
    out.push_back(e);
  }
  Epilogue residual_alone;
  residual_alone.residual = true;
  out.push_back(residual_alone);
  return out;
}

std::vector<ConfigCase> epilogue_store_cases() {
  const ConfigCases all = config_cases();
  // The first case of each of these configurations, by its text in config_cases().
  const char* configs[] = {
      "generic",              // direct
      "tiled:8,1,4,1,8",      // direct_tiled's staged rows
      "grouped:8,64,2,4,4",   // element stores
      "depthwise:2,16,2,4",   // 16-byte and element stores
      "igemm:128,64",         // fp32 and tf32
      "sm90:3,64,64,512",     // 3xTF32: single stores of each accumulator
      "sm90:8,8,32,512",      // TW = 8: registers in both classes (tf32 stages TW % 16 == 0 tiles)
      "sm90:4,32,256,512",    // 256 columns (tf32 only), staged: rounds rolled, OW odd (copies of 1)
      "sm90:2,64,64,4,1",     // staged TH x TW tiles, OW even: copies of 2 positions
      "sm90:2,64,64,4,1,1",   // staged boxes of row tiles: TMA stores, or the warps' copies
      "sm90:4,64,64,512,1,1,2",
      "sm90:2,64,64,512,1,0,2",  // paired rows: staged in two planes (8-byte stores when plain)
      "sm90:16,8,64,32,1,0,1,1",  // tiles across images: a position's image and row from its row of all images
  };
  // The first description of the first list of each (configuration, class): every epilogue
  // compiles once per case, so the count stays small.
  std::vector<ConfigCase> out;
  for (const char* config : configs) {
    for (const Precision precision : {Precision::Fp32, Precision::Tf32}) {
      for (const ConfigCase& c : all.forced) {
        if (c.config != config || c.descs[0].precision != precision) continue;
        out.push_back({c.config, {c.descs[0]}});
        break;
      }
    }
  }
  return out;
}

std::vector<ConfigCase> padding_mode_cases() {
  const Padding causal = Padding::per_side({2, 1, 1}, {0, 1, 2});  // before > after, after > before
  // Reflection's bound: padding 3 along W of 9 columns, 2 along H of 4 rows (extent - 1 ... ).
  const Padding deep = Padding::per_side({1, 3, 3}, {2, 0, 3});
  std::vector<ConfigCase> out = {
      {"generic", {make(1, 3, {5, 4, 9}, 5, {3, 3, 3}, 1, deep, 1, 1, true)}},
      {"tiled:8,1,4,1,8", {make(1, 8, {6, 11, 20}, 20, {3, 3, 3}, {1, 2, 2}, causal, 1, 1, true)}},
      {"grouped:8,64,2,4,4",
       {make(1, 12, {6, 9, 13}, 24, {3, 3, 3}, {1, 2, 2}, 1, 1, 12),
        make(1, 16, {7, 10, 23}, 8, {1, 3, 5}, 1, Dims3{0, 2, 1}, {1, 2, 1}, 4)}},
      // W % 4 == 0: 16-byte loads inside, element loads at the edges (and the unaligned twin);
      // W = 30: element loads throughout.
      {"depthwise:2,16,2,4",
       {make(2, 16, {6, 11, 24}, 16, {3, 3, 3}, 1, causal, 1, 16, true),
        make(1, 6, {5, 9, 30}, 6, {2, 2, 7}, 1, Dims3{0, 1, 3}, 1, 6, true)}},
      {"igemm:128,64", {make(1, 8, {6, 11, 21}, 20, {3, 3, 3}, {1, 2, 2}, deep, 1, 1, true)}},
      // Single chunk (TMA would serve zeros here), chunks of 4 channels, row tiles, dilation.
      {"sm90:3,64,64,512", {make(2, 3, {5, 12, 37}, 13, {3, 5, 7}, 1, Padding::same(), 1, 1, true)}},
      {"sm90:2,64,64,4", {make(1, 7, {5, 12, 17}, 17, {3, 3, 3}, 1, causal, {1, 2, 2})}},
      {"sm90:4,32,64,3,0,1", {make(1, 5, {7, 12, 19}, 9, {2, 3, 3}, 1, deep, {2, 1, 2})}},
      // TMA boxes (W % 4 == 0), whose padded cells the kernel rewrites from the tile or, past its
      // reach (circular; deep's 3 columns), from the input: one chunk (warps run apart), chunks of
      // 4 of 7 channels with stride, row tiles with dilation along D.
      {"sm90:2,64,64,512,1", {make(2, 3, {5, 12, 36}, 13, {3, 5, 7}, 1, Padding::same(), 1, 1, true)}},
      {"sm90:2,64,64,4,1", {make(1, 7, {5, 13, 24}, 17, {3, 3, 3}, {2, 2, 1}, causal, 1, 1, true)}},
      {"sm90:4,32,64,3,1,1", {make(1, 5, {7, 12, 20}, 9, {2, 3, 3}, 1, deep, {2, 1, 2})}},
  };
  std::vector<ConfigCase> both;
  for (ConfigCase c : out) {
    both.push_back(c);
    for (Conv3dDesc& d : c.descs) d.precision = Precision::Tf32;
    both.push_back(c);
  }
  return both;
}

std::vector<Conv3dDesc> random_depthwise(int count, unsigned seed, const DepthwiseRanges& r) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Conv3dDesc> out;
  while (static_cast<int>(out.size()) < count) {
    const int c = pick(2, r.c);
    const Dims3 kernel{pick(1, static_cast<int>(r.kernel.d)), pick(1, static_cast<int>(r.kernel.h)),
                       pick(1, static_cast<int>(r.kernel.w))};
    if (kernel.d * kernel.h * kernel.w > 32) continue;
    const Conv3dDesc d =
        make(pick(1, r.n), c,
             {pick(1, static_cast<int>(r.in.d)), pick(1, static_cast<int>(r.in.h)), pick(1, static_cast<int>(r.in.w))},
             c * pick(1, r.multiplier), kernel, {1, pick(1, r.stride_h), 1},
             Dims3{pick(0, static_cast<int>(r.pad.d)), pick(0, static_cast<int>(r.pad.h)),
                   pick(0, static_cast<int>(r.pad.w))},
             {pick(1, r.dilation), pick(1, r.dilation), pick(1, r.dilation)}, c, pick(0, 1) == 1);
    if (validate(d).ok) out.push_back(d);
  }
  return out;
}

Conv3dDesc random_shape(std::mt19937& rng, int max_c, int max_w, int max_k) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int groups = pick(0, 3) == 0 ? pick(2, 4) : 1;
  return make(pick(1, 3), groups * pick(1, max_c), {pick(1, 12), pick(1, 14), pick(1, max_w)}, groups * pick(1, max_k),
              {pick(1, 4), pick(1, 4), pick(1, 5)}, {pick(1, 2), pick(1, 3), pick(1, 2)},
              Dims3{pick(0, 2), pick(0, 2), pick(0, 2)}, {pick(1, 2), pick(1, 2), pick(1, 3)}, groups, pick(0, 1) == 1);
}

std::vector<Conv3dDesc> random_ndhwc(int count, unsigned seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<Epilogue> epilogues = epilogue_cases();
  std::vector<Conv3dDesc> out;
  while (static_cast<int>(out.size()) < count) {
    Conv3dDesc d = random_shape(rng, 40, 70, 70);
    d.layout = Layout::NDHWC;
    const int type = pick(0, 3);
    d.dtype = type == 2 ? DataType::BFloat16 : type == 3 ? DataType::Float16 : DataType::Float32;
    d.precision = type == 1 ? Precision::Tf32 : Precision::Fp32;
    if (pick(0, 3) == 0) d.padding_mode = pick(0, 1) == 1 ? PaddingMode::Reflect : PaddingMode::Circular;
    if (pick(0, 2) == 0) d.epilogue = epilogues[static_cast<size_t>(pick(0, static_cast<int>(epilogues.size()) - 1))];
    if (validate(d).ok) out.push_back(d);
  }
  return out;
}

}  // namespace conv3djit::test
