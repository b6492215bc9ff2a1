// Epilogue of the paged attention kernel: the sigmoid gate, the bf16 store,
// and the split-KV combine. With several splits, each CTA writes its fp32
// partial (m, l, acc) of its (row, group) to scratch, and the last of the
// row's splits to finish (an arrival counter per (row, group), reset by
// that CTA, so every launch finds it zero) merges them, applies v_scale and
// the gate, and rounds once to bf16: no second launch.
//
// Scratch layout: acc f32 [rows, H, S, D], stats f32 [rows, H, S, 2] =
// (m in log2 units, l); the arrival counters u32 [rows, G] live apart
// (PagedAttentionParams::split_arrivals), in memory no partial overlaps.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/launch.h"
#include "cuda/attention/ptx.cuh"

namespace step5::cuda::attn {

__device__ __forceinline__ float sigmoid_of_bf16(uint16_t bits) {
  const float x = __uint_as_float(static_cast<uint32_t>(bits) << 16);
  return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ void store_bf16x8(uint16_t* dst, const float (&v)[8]) {
  uint4 w;
  w.x = pack_bf16x2(v[0], v[1]);
  w.y = pack_bf16x2(v[2], v[3]);
  w.z = pack_bf16x2(v[4], v[5]);
  w.w = pack_bf16x2(v[6], v[7]);
  *reinterpret_cast<uint4*>(dst) = w;
}

// o (8 values of head `head`, not yet normalized) times v_scale / l and the
// head's gate, stored as bf16 at output row t.
__device__ __forceinline__ void store_output(const PagedAttentionParams& p, int64_t t, int head,
                                             int d0, float v_scale, float lsum, float (&o)[8]) {
  float f = v_scale / lsum;
  if (p.gate != nullptr) f *= sigmoid_of_bf16(p.gate[t * p.gate_row_stride + head]);
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] *= f;
  store_bf16x8(p.output + t * p.output_row_stride + head * p.output_head_stride + d0, o);
}

__device__ __forceinline__ float* split_acc(const PagedAttentionParams& p, int num_splits, int D) {
  (void)num_splits;
  (void)D;
  return static_cast<float*>(p.scratch);
}
__device__ __forceinline__ float* split_stats(const PagedAttentionParams& p, int num_splits,
                                              int D) {
  return static_cast<float*>(p.scratch) + p.num_rows * p.num_heads * num_splits * int64_t{D};
}
// Whether this CTA is the last of its (row, group)'s splits to arrive; call
// with every thread after its partials are written.
__device__ __forceinline__ bool last_split(const PagedAttentionParams& p, int num_splits, int D,
                                           int64_t local, int g) {
  __shared__ int last;
  __threadfence();  // this CTA's partials before its arrival
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* arrivals = p.split_arrivals + local * p.num_kv_heads + g;
    last = atomicAdd(arrivals, 1u) == static_cast<uint32_t>(num_splits) - 1;
    if (last) *arrivals = 0;  // ready for the next launch
  }
  __syncthreads();
  if (last) __threadfence();  // the other splits' partials before reading them
  return last != 0;
}

// Merges the splits of heads [head_first, head_last) of launch row `local`
// (step row t).
template <int D, int kThreads>
__device__ void combine_splits(const PagedAttentionParams& p, int num_splits, float v_scale,
                               int64_t local, int64_t t, int head_first, int head_last) {
  const float* part = split_acc(p, num_splits, D);
  const float* stats = split_stats(p, num_splits, D);
  for (int idx = head_first * (D / 8) + static_cast<int>(threadIdx.x); idx < head_last * (D / 8);
       idx += kThreads) {
    const int head = idx / (D / 8);
    const int d0 = (idx % (D / 8)) * 8;
    const int64_t slot0 = (local * p.num_heads + head) * num_splits;
    float mmax = -INFINITY;
    for (int s = 0; s < num_splits; ++s) mmax = fmaxf(mmax, __ldcg(stats + (slot0 + s) * 2));
    float lsum = 0.0f;
    float o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int s = 0; s < num_splits; ++s) {
      const float ms = __ldcg(stats + (slot0 + s) * 2);
      if (ms == -INFINITY) continue;  // an empty split
      const float wt = exp2f(ms - mmax);
      lsum += wt * __ldcg(stats + (slot0 + s) * 2 + 1);
      const float4 a = __ldcg(reinterpret_cast<const float4*>(part + (slot0 + s) * D + d0));
      const float4 b = __ldcg(reinterpret_cast<const float4*>(part + (slot0 + s) * D + d0 + 4));
      o[0] += wt * a.x;
      o[1] += wt * a.y;
      o[2] += wt * a.z;
      o[3] += wt * a.w;
      o[4] += wt * b.x;
      o[5] += wt * b.y;
      o[6] += wt * b.z;
      o[7] += wt * b.w;
    }
    store_output(p, t, head, d0, v_scale, lsum, o);
  }
}

}  // namespace step5::cuda::attn
