// The Hopper tile attention kernel for CSA layers: the page source of the
// mma.sync kernel (page_source.cuh, hopper_csa_list.cuh), the wgmma
// mainloop (hopper_mainloop.cuh) and the epilogue of hopper_tile_io.cuh.
// One CTA per (tile, KV group), two warpgroups of 8 tile rows x 8 heads
// each. SWA layers run the persistent hopper_window_kernel.cuh. sm_90a only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention/ptx.cuh"
#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/hopper_mainloop.cuh"
#include "cuda/tile_attention/hopper_tile_io.cuh"
#include "cuda/tile_attention/hopper_window_list.cuh"
#include "cuda/tile_attention/page_source.cuh"

namespace step5::cuda::tiled {

template <int D, bool kFp8>
__global__ void __launch_bounds__(hopper_threads(), 1)
    hopper_csa_tiles_kernel(const TileAttentionParams tp) {
  // wgmma exists only on sm_90a: every other device target gets a body
  // that traps (the schedule never picks this kernel there).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)tp;
  __trap();
#else
  // A tile the choice sent to the row kernel (tile_choice.h): written by a
  // launch that ended before this one started.
  if (tp.tile_runs != nullptr && tp.tile_runs[blockIdx.x / tp.attn.num_kv_heads] == 0) return;
  using Smem = HopperTileSmem<D>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Atoms on 1024-byte boundaries (pointer arithmetic on the shared array,
  // so accesses stay shared): the launch adds kAlignSlack bytes. (As a
  // helper returning the reference, this changed the fp8 kernel's spills.)
  Smem& sm =
      *reinterpret_cast<Smem*>(smem_raw + ((1024u - (attn::smem_addr(smem_raw) & 1023u)) & 1023u));
  const PagedAttentionParams& p = tp.attn;
  const int tid = static_cast<int>(threadIdx.x);
  // The warpgroup broadcast from lane 0, so that ptxas keeps the Q
  // descriptors made from it in uniform registers (uniform_stage_addr).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp = (tid % 128) / 32, lane = tid % 32;
  TileStart t = tile_of(tp, static_cast<int>(blockIdx.x));
  const int g = t.g, count = t.count;
  const int64_t first = t.first;
  read_tile_rows(p, t, sm);

  HopperState<D> w;
  hopper_init_state<D, kFp8>(p, warpgroup, warp, sm, w);
  // The bf16 kernel loads the gates now; the fp8 kernel, at its register
  // limit, in the epilogue.
  uint16_t gate[2];
  if constexpr (!kFp8) load_gates<D>(p, first, count, g, w, gate);
  // Q's copies are the oldest cp.async group, complete by the mainloop's
  // first barrier. They are issued after the tile's rows are read, as the
  // measured code did (in the fp8 kernel, at the register limit, moving
  // them changed the mainloop's code).
  hopper_stage_q<D>(p, first, count, g, sm);
  // (Written out: as a helper taking the shared memory by const
  // reference, it changed this kernel's code.)
  w.desc_q = wgmma::sw128_desc(attn::smem_addr(sm.q) + warpgroup * Smem::kQWarpgroupBytes, 16,
                               Smem::kQGroupBytes);

  const char* kv_head = kv_of_group(p, g);
  // Windows of window_regions() regions from the lowest attended one.
  const TileKeys keys = tile_keys(t.live, sm);
  if constexpr (kFp8) {
    // The stage format (f16 or bf16) depends on Q, so the mainloop waits
    // for Q's copy; the first window's list (for contexts up to 16K tokens
    // the only one) is built and prepared before that wait, while the copy
    // is in flight.
    int32_t first_length = 0;
    if (keys.region_lo <= keys.region_hi) {
      first_length = hopper_csa_list(p, first, t.live, t.request, keys, keys.region_lo, sm);
    }
    auto run = [&](auto f16) {
#pragma unroll 1
      for (int32_t base = keys.region_lo; base <= keys.region_hi; base += window_regions()) {
        const int32_t length = base == keys.region_lo
                                   ? first_length
                                   : hopper_csa_list(p, first, t.live, t.request, keys, base, sm);
        hopper_run_window<D, kFp8, decltype(f16)::value, true>(p, kv_head, length, keys.key_lo,
                                                               keys.key_hi, w, sm);
      }
    };
    hopper_run_in_q_format<D>(sm, lane, w, run);
  } else {
    // bf16 stages: the mainloop's first barrier waits for Q.
#pragma unroll 1
    for (int32_t base = keys.region_lo; base <= keys.region_hi; base += window_regions()) {
      const int32_t length = hopper_csa_list(p, first, t.live, t.request, keys, base, sm);
      hopper_run_window<D, kFp8, false, true>(p, kv_head, length, keys.key_lo, keys.key_hi, w, sm);
    }
  }
  __syncthreads();  // sm.faulted complete; stage buffers free
  const uint32_t bad = (t.wanted & ~t.live) | sm.faulted;
  if constexpr (kFp8) load_gates<D>(p, first, count, g, w, gate);
  hopper_store_tile<D, Smem>(p, first, count, g, kFp8 ? p.v_scale : 1.0f, bad, gate, w, sm.buffer);
#endif
}

}  // namespace step5::cuda::tiled
