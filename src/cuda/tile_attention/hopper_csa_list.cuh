// CSA page source of the Hopper tile attention kernel: the window's region
// list as its mainloop reads it (hopper_page_copy.cuh, hopper_mainloop.cuh),
// from the shared page source's row masks and compaction (page_source.cuh),
// with each entry's kCutRegion bit and token offset in its block. sm_90a
// only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/hopper_page_copy.cuh"
#include "cuda/tile_attention/page_source.cuh"
#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// Sets kCutRegion in the row masks of the regions where a live row's key
// range ends inside: a CSA row attends keys from 0 (p.window is 0 for CSA)
// up to its position, so only its own region can be cut, and the row
// attends that region, so the bit never lands on a region without rows.
// One thread per row, before the compaction, so the bit travels with the
// mask into the list (bit 31, above every row's: the compaction's fault
// report still names the lowest row, and rows read only their own bits of
// the faulted mask). (It replaces a test of every list entry against
// every row's ends, ~45 cycles per row and entry on an H100, and a binary
// search per row in the compacted list.) Between the row masks' barrier
// and the compaction.
template <class Smem>
__device__ __forceinline__ void mark_cut_regions(uint32_t live, int32_t base, int span, Smem& sm) {
  const int j = static_cast<int>(threadIdx.x);
  if (j < tile_rows() && ((live >> j) & 1u) != 0) {
    const int32_t i = sm.row_position[j] / attn::page_tokens() - base;
    if (i >= 0 && i < span) atomicOr(&sm.row_mask[i], kCutRegion);
  }
  __syncthreads();
}

// The CSA list of the window at `base`: the shared page source's list
// (build_window_list) with the cut regions marked between its row masks and
// its compaction, then each entry's token offset in its block
// (region_slots, in the row masks' bytes, free by then). Ends with a
// barrier; returns the list's length.
template <class Smem>
__device__ int32_t hopper_csa_list(const PagedAttentionParams& p, int64_t first, uint32_t live,
                                   int32_t request, const TileKeys& keys, int32_t base, Smem& sm) {
  const int32_t length = build_window_list(p, first, live, request, keys, base, sm, [&](int span) {
    mark_cut_regions(live, base, span, sm);
  });
  const int32_t pages_per_block = p.block_size / attn::page_tokens();
  int32_t* slots = region_slots(sm);
  for (int32_t e = static_cast<int32_t>(threadIdx.x); e < length; e += hopper_threads()) {
    slots[e] = (sm.list_region[e] % pages_per_block) * attn::page_tokens();
  }
  __syncthreads();
  return length;
}

}  // namespace step5::cuda::tiled
