// Tile attention (prefill rows on tensor cores): one CTA computes a tile of
// up to 16 consecutive query rows of one request for one KV group, so each
// K/V page that several of those rows attend is read once for all of them.
//
// Design. The H/G heads of a row are H/G rows of the m16n8k16 M side; a
// warp holds 16 / (H/G) rows x H/G heads = 16 MMA rows, and a CTA has H/G
// warps (H/G in 1, 2, 4, 8). The CTA walks the union of its rows' key sets
// region by region (8 keys): the page source (page_source.cuh) builds, for
// a window of regions at a time, which rows attend each region (a 32-bit
// row mask) and compacts the regions some row attends into an ordered list
// with their cache blocks; the mainloop (mainloop.cuh) streams that list
// through a cp.async pipeline shared by all warps, and each warp skips the
// 16-key steps none of its rows attend and masks the others per (row, key);
// the epilogue (epilogue.cuh) normalizes, gates and stores through shared
// memory. CSA rows attend their selected regions and their own region up
// to themselves; SWA rows the keys p-W+1..p. Numerics are those of the row
// kernel (attention/launch.h): the same fragments, fp32 online softmax,
// one final rounding.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/launch.h"

namespace step5::cuda {

struct TileAttentionParams {
  // The layer, its rows and pages, activations and cache as for the row
  // kernel; `row_begin` is the step row of selection row 0 (the scoring
  // chunk's first row). Split-KV, scratch, padding and row_list fields are
  // not used: a tile is never split and padding rows are never tiled.
  PagedAttentionParams attn;
  const int32_t* tiles = nullptr;  // i32 [num_tiles, 2] device; not null when num_tiles > 0:
                                   // first step row, row count (1..16), rows of one request
  int32_t num_tiles = 0;
  // CSA on the sm_90a kernel, when each tile was decided on the device
  // (tile_choice.h): tile i runs only where tile_runs[i] != 0, its rows
  // going to the row kernel otherwise. May be null: every tile runs.
  const int32_t* tile_runs = nullptr;  // i32 [num_tiles] device
  // The sm_90a kernels (hopper_csa_kernel.cuh, hopper_window_kernel.cuh: wgmma,
  // H/G = 8) instead of the mma.sync one; the schedule's choice
  // (LayerSchedule::tile_wgmma).
  bool wgmma = false;
  // SWA on the sm_90a kernel: CTAs of its persistent grid, each looping
  // over (tile, group) items (hopper_window_kernel.cuh); the schedule's
  // LayerSchedule::tile_ctas. Not used otherwise.
  int32_t ctas = 0;
};

// Whether the tile kernel serves the layer (H/G in {1, 2, 4, 8}, D in the
// compiled set) within `max_smem` bytes of shared memory per block.
bool tile_attention_supports(const LayerConfig& config, size_t max_smem);

// Whether the sm_90a (wgmma) tile kernel serves the layer: H/G = 8,
// D in the compiled set, within `max_smem` bytes per block. Only the
// Hopper kernel path may run it.
bool tile_attention_wgmma_supports(const LayerConfig& config, size_t max_smem);

// Computes every row of params.num_tiles tiles into params.attn.output.
// Throws Error(unsupported) for a layer tile_attention_supports rejects,
// Error(invalid_argument) for inconsistent params. Asynchronous on `stream`.
void launch_tile_attention(const TileAttentionParams& params, cudaStream_t stream);

}  // namespace step5::cuda
