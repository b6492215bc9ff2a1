// Epilogue of the tile attention kernel: each warp's 16 rows normalized
// (v_scale / l), gated (sigmoid of the head's gate), rounded once to bf16
// and staged in shared memory, then stored 16 bytes at a time. Rows that
// met a fault come out NaN.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/fragments.cuh"
#include "cuda/tile_attention/geometry.h"
#include "cuda/tile_attention/mainloop.cuh"

namespace step5::cuda::tiled {

template <class T, class Smem>
__device__ void store_tile(const PagedAttentionParams& p, int64_t first, int count, int g, int hpg,
                           uint32_t bad_rows, WarpState<T::kDim>& w, Smem& sm) {
  constexpr int D = T::kDim;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int r0 = lane / 4;
  const int rows_per_warp = 16 / hpg;
  // The pipeline drained (run_window's last barrier): the stage buffers
  // hold the output now.
  uint16_t* out = reinterpret_cast<uint16_t*>(sm.buffer) + warp * 16 * Smem::kOutPitch;
  const float v_scale = T::kIsFp8 ? p.v_scale / attn::kFp8PScale : 1.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = w.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = r0 + 8 * h;
    const int j = w.row[h];
    float f = v_scale / l;
    if (j < count && p.gate != nullptr) {
      f *= attn::sigmoid_of_bf16(p.gate[(first + j) * p.gate_row_stride + g * hpg + r % hpg]);
    }
    if (((bad_rows >> j) & 1u) != 0) f = NAN;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = w.acc[nd][2 * h + e] * f;
        out[r * Smem::kOutPitch + attn::output_column<T>(nd, e, lane % 4)] =
            static_cast<uint16_t>(attn::pack_bf16x2(v, 0.0f) & 0xffffu);
      }
    }
  }
  __syncwarp();
  for (int idx = lane; idx < 16 * (D / 8); idx += 32) {
    const int r = idx / (D / 8), d0 = (idx % (D / 8)) * 8;
    const int j = warp * rows_per_warp + r / hpg;
    if (j >= count) continue;
    const int head = g * hpg + r % hpg;
    *reinterpret_cast<uint4*>(p.output + (first + j) * p.output_row_stride +
                              head * p.output_head_stride + d0) =
        *reinterpret_cast<const uint4*>(out + r * Smem::kOutPitch + d0);
  }
}

}  // namespace step5::cuda::tiled
