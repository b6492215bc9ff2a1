// The tile attention kernel: page source, mainloop and epilogue composed
// (see params.h for the design). One CTA per (tile, KV group), H/G warps.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/fragments.cuh"
#include "cuda/tile_attention/epilogue.cuh"
#include "cuda/tile_attention/geometry.h"
#include "cuda/tile_attention/mainloop.cuh"
#include "cuda/tile_attention/page_source.cuh"

namespace step5::cuda::tiled {

constexpr float kLog2e = 1.4426950408889634f;

// Q of the warp's 16 MMA rows (tile row j = warp * 16 / hpg + r / hpg, head
// g * hpg + r % hpg) as A fragments; rows of absent tile rows are zero.
template <class T>
__device__ __forceinline__ void load_tile_q(const PagedAttentionParams& p, int64_t first, int count,
                                            int g, int hpg, int warp, int lane,
                                            uint32_t (&qf)[T::kDim / 16][4]) {
  const int r0 = lane / 4, t = lane % 4;
  const uint16_t* q[2];
  bool present[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    const int j = warp * (16 / hpg) + r / hpg;
    present[h] = j < count;
    q[h] = p.query + (first + j) * p.query_row_stride +
           int64_t{g * hpg + r % hpg} * p.query_head_stride;
  }
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = attn::fragment_column<T>(kk, i, t);
      qf[kk][i] = present[i & 1] ? __ldg(reinterpret_cast<const uint32_t*>(q[i & 1] + col)) : 0u;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(max_heads_per_group() * 32)
    tile_attention_kernel(const TileAttentionParams tp) {
  using Smem = TileSmem<T>;
  constexpr int D = T::kDim;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const PagedAttentionParams& p = tp.attn;
  const int hpg = p.num_heads / p.num_kv_heads;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const TileStart t = start_tile(tp, sm);
  const int g = t.g, count = t.count;
  const int64_t first = t.first;

  uint32_t qf[D / 16][4];
  load_tile_q<T>(p, first, count, g, hpg, warp, lane, qf);
  WarpState<D> w;
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) w.acc[nd][0] = w.acc[nd][1] = w.acc[nd][2] = w.acc[nd][3] = 0;
  const int rows_per_warp = 16 / hpg;
  w.rows = ((1u << rows_per_warp) - 1u) << (warp * rows_per_warp);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.m[h] = -INFINITY;
    w.l[h] = 0.0f;
    w.row[h] = warp * rows_per_warp + (lane / 4 + 8 * h) / hpg;
    w.hi[h] = sm.row_position[w.row[h]];
    w.lo[h] = sm.row_low[w.row[h]];
    w.scale_log2[h] = p.softmax_scale * (T::kIsFp8 ? p.k_scale : 1.0f) * kLog2e;
  }
  if constexpr (T::kIsFp8) {
    float row_scale[2];
    w.q_f16 = attn::q_to_f16<T>(lane, qf, row_scale);
    if (w.q_f16) {
      w.scale_log2[0] *= row_scale[0];
      w.scale_log2[1] *= row_scale[1];
    }
  }

  const char* kv_head = static_cast<const char*>(p.kv) + int64_t{g} * p.kv_head_stride;
  for_each_window(p, first, t.live, t.request, sm,
                  [&](int32_t length, int32_t key_lo, int32_t key_hi) {
                    run_window<T>(p, kv_head, length, key_lo, key_hi, lane, qf, w, sm);
                  });
  __syncthreads();  // sm.faulted complete; stage buffers free
  const uint32_t bad = (t.wanted & ~t.live) | sm.faulted;
  store_tile<T>(p, first, count, g, hpg, bad, w, sm);
}

}  // namespace step5::cuda::tiled
