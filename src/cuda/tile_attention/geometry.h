// Tile sizes of the tile attention family and its shared memory, as
// constexpr values the kernel and the launcher share; comments say why.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/attention/tiles.h"

namespace step5::cuda::tiled {

// Query rows per tile: 16 rows x H/G heads fill H/G warps of 16 MMA rows,
// and the rows that attend a region fit a 32-bit mask with room to spare.
constexpr int tile_rows() {
  return 16;
}
// The most heads per group: 8 warps of 16 MMA rows each (a CTA of 256
// threads; at D = 192 the fragments take all 255 registers a thread may
// have, so one CTA per SM).
constexpr int max_heads_per_group() {
  return 8;
}

// Regions per pipeline stage: 32 keys, two 16-key MMA steps. Small stages
// let a warp skip a step none of its rows attend without waiting on the
// copies of a large one.
constexpr int stage_regions() {
  return 4;
}
constexpr int stage_keys() {
  return stage_regions() * attn::page_tokens();
}
constexpr int steps_per_stage() {
  return stage_keys() / attn::keys_per_step();
}

// Stages in flight: ~100 KB per CTA for bf16 (4 x 25 KB at D = 192) and
// the same bytes for fp8 (8 stages of half the size), the bytes in flight
// the row kernel found enough to cover L2 and DRAM latency.
constexpr int tile_stages(bool fp8) {
  return fp8 ? 8 : 4;
}

// Regions whose row masks are built at once: 2,048 regions (16K tokens of
// context) in 32 KB of masks and list; longer contexts take several windows.
constexpr int window_regions() {
  return 2048;
}

// Shared memory of one CTA for the row tile T (attention/tiles.h).
template <class T>
struct TileSmem {
  static constexpr int kStageBytes = steps_per_stage() * T::kStageBytes;
  static constexpr int kStages = tile_stages(T::kIsFp8);
  // The epilogue stages each warp's 16 output rows as bf16, padded by 16
  // bytes per row, in the same bytes once the pipeline has drained.
  static constexpr int kOutPitch = T::kDim + 8;  // elements
  static constexpr int kOutBytes = max_heads_per_group() * 16 * kOutPitch * 2;
  static constexpr int kBufferBytes = std::max(kStages * kStageBytes, kOutBytes);

  alignas(128) unsigned char buffer[kBufferBytes];
  uint32_t row_mask[window_regions()];        // rows attending region base + i (build phase)
  int32_t list_region[window_regions()];      // the window's attended regions, ascending
  uint32_t list_mask[window_regions()];       // their row masks
  int32_t list_block[window_regions()];       // their cache blocks; -1: outside the cache
  int32_t row_position[tile_rows()];          // position of each row; -1: no row
  int32_t row_low[tile_rows()];               // first key position each row may attend
  int32_t warp_count[max_heads_per_group()];  // compaction: attended regions per warp
  int32_t request;                            // the tile's request
  uint32_t faulted;  // rows that met a block outside the cache (output NaN)

  static_assert(kStageBytes % 128 == 0, "stages stay 128-byte aligned");
  static_assert(T::kStageBytes % 16 == 0, "16-byte cp.async destinations");
  static_assert(window_regions() % 256 == 0, "windows are whole passes of 256 threads");
  static_assert(tile_rows() < 32, "row masks are 32-bit with room for the shift of a full tile");
};

}  // namespace step5::cuda::tiled
