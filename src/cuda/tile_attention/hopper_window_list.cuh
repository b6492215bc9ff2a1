// Page source of the Hopper tile attention kernel: the window's region list
// as its mainloop reads it (hopper_page_copy.cuh, hopper_mainloop.cuh):
// each entry's region, row mask, cache block, token offset in the block
// (region_slots) and the kCutRegion bit. CSA lists come from the shared
// page source (hopper_csa_list.cuh); SWA lists are built here in one pass.
// sm_90a only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/guard.h"
#include "cuda/tile_attention/hopper_csa_list.cuh"
#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/hopper_page_copy.cuh"
#include "cuda/tile_attention/page_source.cuh"
#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// SWA: the list of the window at `base` is every region from there to the
// tile's last one, each entry complete (row mask, cut bit, block, slot) in
// one pass and one barrier, where CSA needs masks, a compaction and a pass
// for the slots (built that way, an SWA tile's list took ~6.7K of its
// 48.8K cycles on an H100, nineteenth session).
// The rows of a tile are consecutive positions of one request, so their
// windows' union has no gap; a region that no live row attends (a row that
// is not live can leave one) stays in the list with an empty mask and no
// block: its keys are zero-filled and masked, never read. A region is cut
// when some row attends only part of it. Ends with a barrier.
template <class Smem>
__device__ int32_t hopper_swa_list(const PagedAttentionParams& p, int64_t first, uint32_t live,
                                   int32_t request, const TileKeys& keys, int32_t base, Smem& sm) {
  constexpr int32_t kPage = attn::page_tokens();
  const int32_t length = min(window_regions(), keys.region_hi - base + 1);
  const int32_t* bt = p.block_table + int64_t{request} * p.block_table_stride;
  const int32_t pages_per_block = p.block_size / kPage;
  int32_t* slots = region_slots(sm);
  for (int32_t e = static_cast<int32_t>(threadIdx.x); e < length; e += hopper_threads()) {
    const int32_t region = base + e;
    const int32_t key0 = region * kPage, key_last = key0 + kPage - 1;
    uint32_t mask = 0;
    bool cut = false;
    // Not unrolled: unrolled, ptxas spills in the fp8 kernel.
#pragma unroll 1
    for (int j = 0; j < tile_rows(); ++j) {
      const int32_t lo = sm.row_low[j], hi = sm.row_position[j];
      const bool in = ((live >> j) & 1u) != 0 && key0 <= hi && key_last >= lo;
      mask |= (in ? 1u : 0u) << j;
      cut = cut || (in && (lo > key0 || hi < key_last));
    }
    int32_t block = -1;
    if (mask != 0) {
      block = __ldg(bt + region / pages_per_block);
      if (!block_ok(p.guard, block)) {
        report_fault(p.guard, DeviceFault::kv_block, first + __ffs(mask) - 1, block);
        atomicOr(&sm.faulted, mask);
        block = -1;
      }
    }
    sm.list_region[e] = region;
    sm.list_mask[e] = cut ? mask | kCutRegion : mask;
    sm.list_block[e] = block;
    slots[e] = (region % pages_per_block) * kPage;
  }
  __syncthreads();
  return length;
}

// The mainloop's list of the window at `base` (region keys.region_lo for
// the first); its length. kCsa: the layer's kind, a template parameter of
// the kernel (one kernel per page source: with both lists in one kernel,
// ptxas turned the mainloop's masking into branches, ~110 more
// instructions per stage). Ends with a barrier.
template <bool kCsa, class Smem>
__device__ __forceinline__ int32_t hopper_window_list(const PagedAttentionParams& p, int64_t first,
                                                      uint32_t live, int32_t request,
                                                      const TileKeys& keys, int32_t base,
                                                      Smem& sm) {
  if constexpr (kCsa) {
    return hopper_csa_list(p, first, live, request, keys, base, sm);
  } else {
    return hopper_swa_list(p, first, live, request, keys, base, sm);
  }
}

}  // namespace step5::cuda::tiled
