// Tile sizes and shared memory of the Hopper (wgmma) tile attention kernel,
// as constexpr values the kernel and the launcher share; comments say why.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/attention/heuristics.h"
#include "cuda/tile_attention/geometry.h"

namespace step5::cuda::tiled {

// wgmma's M is 64 rows per warpgroup: 8 tile rows x 8 heads of one group,
// so the kernel serves H/G = 8 (the other ratios keep the mma.sync kernel),
// and a tile of 16 rows is two consumer warpgroups.
constexpr int hopper_heads_per_group() {
  return 8;
}
constexpr int hopper_warpgroups() {
  return tile_rows() * hopper_heads_per_group() / 64;
}
constexpr int hopper_threads() {
  return hopper_warpgroups() * 128;
}
// Tile rows of one warpgroup (its 64 MMA rows: row 8 r + h is tile row r,
// head h).
constexpr int hopper_rows_per_warpgroup() {
  return tile_rows() / hopper_warpgroups();
}

// CTAs per SM: at D = 192 a CTA's 256 threads take the register file
// (up to 255 registers each) and ~200 KB of shared memory. The SWA kernel's
// persistent grid is this many CTAs per SM.
constexpr int hopper_ctas_per_sm() {
  return 1;
}

// Regions per pipeline stage: 64 keys, the N of one S = Q K^T wgmma and
// four k16 steps of O = P V; one n8 block of S per region, so a thread's
// S columns map to regions without index arithmetic.
constexpr int hopper_stage_regions() {
  return 8;
}
constexpr int hopper_stage_keys() {
  return hopper_stage_regions() * attn::page_tokens();
}

// Stages in flight: three 48 KB stages at D = 192, four below; with
// the tile's Q (48 KB at D = 192) and the region lists that stays under
// Hopper's 227 KB per block, one CTA of 8 warps per SM.
constexpr int hopper_stages(int head_size) {
  return head_size > 128 ? 3 : 4;
}

// Shared memory of one CTA at head size D (K/V staged as bf16; fp8 pages
// land raw in the upper half of each region's bytes and are widened
// exactly in place, to f16 when the tile's Q is staged as f16). A stage
// holds its regions one after the other; a region is its 8 keys' K || V
// rows as 128-byte swizzled atoms of 8 keys x 64 values (K's D / 64 atoms,
// then V's), the wgmma layout of K (K-major) and of V (N-major) alike
// (common/wgmma_attention.cuh). Atoms start on 1024-byte boundaries: the
// kernel aligns the struct (launch with kAlignSlack extra bytes).
template <int D>
struct HopperTileSmem {
  static constexpr int kRowChunks = 2 * D * 2 / 16;  // 16-byte chunks of one K || V row
  static constexpr int kAtomBytes = attn::page_tokens() * 128;
  static constexpr int kAtomsPerHalf = D / 64;  // atoms of K (and of V) per region
  static constexpr int kRegionBytes = 2 * kAtomsPerHalf * kAtomBytes;
  static constexpr int kStageBytes = hopper_stage_regions() * kRegionBytes;
  static constexpr size_t kAlignSlack = 1024;
  // Q of the tile as wgmma A (K-major): per warpgroup its 8 tile rows, each
  // an 8-row group (the 8 heads) of D / 64 atoms.
  static constexpr int kQGroupBytes = kAtomsPerHalf * kAtomBytes;
  static constexpr int kQWarpgroupBytes = hopper_rows_per_warpgroup() * kQGroupBytes;
  static constexpr int kStages = hopper_stages(D);
  // The epilogue stages the tile's 128 output rows as bf16 (pitch padded by
  // 16 bytes) in the same bytes once the pipeline has drained.
  static constexpr int kOutPitch = D + 8;  // elements
  static constexpr int kOutBytes = tile_rows() * hopper_heads_per_group() * kOutPitch * 2;
  static constexpr int kBufferBytes = std::max(kStages * kStageBytes, kOutBytes);
  // The persistent SWA kernel stages them at the buffers' tail instead: the
  // next tile's first kStages - 2 stages are in flight at their head.
  static constexpr int kOutTailOffset = (kBufferBytes - kOutBytes) / 128 * 128;

  alignas(1024) unsigned char buffer[kBufferBytes];
  alignas(1024) unsigned char q[hopper_warpgroups() * kQWarpgroupBytes];
  // The page source's (page_source.cuh), as in TileSmem.
  uint32_t row_mask[window_regions()];
  int32_t list_region[window_regions()];
  uint32_t list_mask[window_regions()];
  int32_t list_block[window_regions()];
  int32_t row_position[tile_rows()];
  int32_t row_low[tile_rows()];
  int32_t warp_count[hopper_threads() / 32];
  float q_scale[tile_rows()][hopper_heads_per_group()];  // fp8: 2^-shift of Q staged as f16
  int32_t request;
  uint32_t faulted;

  static_assert(D % 64 == 0, "K and V rows are whole 128-byte atom rows");
  static_assert(kAtomBytes == 1024, "an atom is 8 rows of the 128-byte swizzle");
  static_assert(hopper_stage_regions() == hopper_threads() / 32,
                "each warp copies one region of a stage");
  static_assert(kRowChunks % 4 == 0, "a warp copies 4 chunks of its region's 8 keys at a time");
  static_assert(kRegionBytes / 16 <= 0x3fff, "descriptor offsets are 14 bits of 16 bytes");
  static_assert(kStageBytes % 1024 == 0, "stages start on atom boundaries");
  static_assert(kOutTailOffset >= (kStages - 2) * kStageBytes,
                "the epilogue's tail staging clears the next tile's first stages");
};

}  // namespace step5::cuda::tiled
