// The Hopper tile attention kernel for SWA layers: the wgmma mainloop
// (hopper_mainloop.cuh) over the window lists of hopper_window_list.cuh,
// in a persistent grid. An SWA tile streams only ~9 stages (W + 15 keys),
// so what a CTA does before and after its mainloop was about a third of
// its time (nineteenth session, per-phase marks on an H100), and with one
// CTA per SM nothing else overlapped it. Here each CTA loops over work
// items (tile, KV group), and prepares the next one (Q's copies, the
// rows, the list and the first stage's copies, raw for fp8) before the
// epilogue of the current one, whose normalization and stores then run
// while those copies are in flight. sm_90a only.
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

// A work item prepared up to its mainloop: its tile and rows (in shared
// memory), its keys, and its first window's list (in shared memory; for
// windows up to window_regions() regions the only one).
struct WindowTile {
  TileStart t;
  TileKeys keys;
  int32_t first_length;  // entries of the first window's list (0: no live row)
};

// Issues Q's copies (the oldest cp.async group), reads the rows, builds
// the first window's list and issues its first stages' copies
// (hopper_start_window; fp8 pages raw, widened once Q has decided the
// format): everything of work item `work` that needs neither the
// registers nor the stage buffers' tail, which the item before it still
// holds for its epilogue. Ends with the list's barrier.
template <int D, bool kFp8, class Smem>
__device__ WindowTile prepare_window_tile(const TileAttentionParams& tp, int work, Smem& sm) {
  const PagedAttentionParams& p = tp.attn;
  WindowTile x;
  x.t = tile_of(tp, work);
  // Issued before the rows are read, whose loads then overlap them.
  hopper_stage_q<D>(p, x.t.first, x.t.count, x.t.g, sm);
  read_item_rows(p, x.t, sm);
  x.keys = tile_keys(x.t.live, sm);
  x.first_length = 0;
  if (x.keys.region_lo <= x.keys.region_hi) {
    x.first_length =
        hopper_swa_list(p, x.t.first, x.t.live, x.t.request, x.keys, x.keys.region_lo, sm);
    hopper_start_window<kFp8>(p, kv_of_group(p, x.t.g), x.first_length, x.keys.key_lo,
                              x.keys.key_hi, sm);
  }
  return x;
}

template <int D, bool kFp8>
__global__ void __launch_bounds__(hopper_threads(), hopper_ctas_per_sm())
    hopper_window_tiles_kernel(const TileAttentionParams tp) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)tp;
  __trap();  // as in hopper_csa_tiles_kernel
#else
  using Smem = HopperTileSmem<D>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm =  // as in hopper_csa_tiles_kernel
      *reinterpret_cast<Smem*>(smem_raw + ((1024u - (attn::smem_addr(smem_raw) & 1023u)) & 1023u));
  const PagedAttentionParams& p = tp.attn;
  int work = static_cast<int>(blockIdx.x);
  WindowTile x = prepare_window_tile<D, kFp8>(tp, work, sm);
#pragma unroll 1
  while (true) {
    // Thread indices are derived in each item, not held across the loop
    // (the fp8 kernel is at its register limit).
    const int tid = static_cast<int>(threadIdx.x);
    const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);  // see hopper_csa_tiles_kernel
    const int warp = (tid % 128) / 32, lane = tid % 32;
    const TileStart t = x.t;
    const TileKeys keys = x.keys;
    const int32_t first_length = x.first_length;
    HopperState<D> w;
    hopper_init_state<D, kFp8>(p, warpgroup, warp, sm, w);
    uint16_t gate[2];
    if constexpr (!kFp8) load_gates<D>(p, t.first, t.count, t.g, w, gate);  // as for CSA
    w.desc_q = wgmma::sw128_desc(attn::smem_addr(sm.q) + warpgroup * Smem::kQWarpgroupBytes, 16,
                                 Smem::kQGroupBytes);
    const char* kv_head = kv_of_group(p, t.g);
    auto list = [&](int32_t base) {
      return base == keys.region_lo
                 ? first_length
                 : hopper_swa_list(p, t.first, t.live, t.request, keys, base, sm);
    };
    if constexpr (kFp8) {
      // The stage format depends on Q (hopper_csa_tiles_kernel).
      auto run = [&](auto f16) {
#pragma unroll 1
        for (int32_t base = keys.region_lo; base <= keys.region_hi; base += window_regions()) {
          hopper_run_window<D, kFp8, decltype(f16)::value, false>(
              p, kv_head, list(base), keys.key_lo, keys.key_hi, w, sm, base == keys.region_lo);
        }
      };
      hopper_run_in_q_format<D>(sm, lane, w, run);
    } else {
#pragma unroll 1
      for (int32_t base = keys.region_lo; base <= keys.region_hi; base += window_regions()) {
        hopper_run_window<D, kFp8, false, false>(p, kv_head, list(base), keys.key_lo, keys.key_hi,
                                                 w, sm, base == keys.region_lo);
      }
    }
    // sm.faulted is final here (only list builds set it, each before its
    // barrier) and read before the barrier below, after which the next
    // item's rows reset it. t.wanted is recomputed from the count: one
    // register fewer at the fp8 kernel's limit.
    const uint32_t bad = (((1u << t.count) - 1u) & ~t.live) | sm.faulted;
    // An item without live rows ran no mainloop: its Q copies may still be
    // in flight, and the next item's write the same bytes.
    attn::cp_async_wait<0>();
    __syncthreads();  // stage buffers, Q, rows and lists free
    const int next = work + static_cast<int>(gridDim.x);
    const int items = tp.num_tiles * p.num_kv_heads;
    if (next < items) x = prepare_window_tile<D, kFp8>(tp, next, sm);
    if constexpr (kFp8) load_gates<D>(p, t.first, t.count, t.g, w, gate);
    // Staged past the stages the next item's copies already fill.
    hopper_store_tile<D, Smem>(p, t.first, t.count, t.g, kFp8 ? p.v_scale : 1.0f, bad, gate, w,
                               sm.buffer + Smem::kOutTailOffset);
    if (next >= items) break;
    work = next;
  }
#endif
}

}  // namespace step5::cuda::tiled
