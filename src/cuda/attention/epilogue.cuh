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

#include "cuda/attention/heuristics.h"
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

// Shared memory combine_splits needs for `heads` heads of `num_splits`
// splits: a weight per (head, split) and a factor per head.
constexpr int combine_work_floats(int heads, int num_splits) {
  return heads * num_splits + heads;
}

// Splits whose partial loads one thread of combine_splits keeps in flight:
// 16 float4 (64 registers, after the mainloop's are dead). Against 8, a
// one-request CSA decode's attention 32 -> 30-31 us (H100, 30 splits; the
// D = 192 kernels' spills unchanged).
constexpr int combine_batch() {
  return 16;
}

// Merges the splits of heads [head_first, head_last) of launch row `local`
// (step row t), in two phases whose loads go out together: one warp per
// head reads every split's (m, l) (lanes over splits) and leaves the
// split's weight exp2(m - max) and the head's factor v_scale / l (times
// its gate) in `work` (combine_work_floats(), shared memory free here);
// then each thread sums its float4 chunks over the splits,
// combine_batch() splits' loads at a time. (A thread per 8 values walking
// the splits one dependent load after another took ~30 of the ~41 us of a
// one-request CSA decode's attention at 30 splits, ncu on an H100.) The
// sums over splits run in split order, as the partials' merge always did;
// a split with no keys (m = -inf) weighs 0. Call with every thread.
template <int D, int kThreads>
__device__ void combine_splits(const PagedAttentionParams& p, int num_splits, float v_scale,
                               int64_t local, int64_t t, int head_first, int head_last,
                               float* work) {
  static_assert(max_splits() <= 64, "phase one holds two splits per lane");
  static_assert(D % 4 == 0 && kThreads % 32 == 0, "float4 chunks, whole warps");
  constexpr int kWarps = kThreads / 32;
  constexpr int kChunks = D / 4;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int heads = head_last - head_first;
  const float* part = split_acc(p, num_splits, D);
  const float* stats = split_stats(p, num_splits, D);
  float* weight = work;                       // [heads][num_splits]
  float* factor = work + heads * num_splits;  // [heads]
  for (int h = warp; h < heads; h += kWarps) {
    const int64_t slot0 = (local * p.num_heads + head_first + h) * num_splits;
    float m[2], l[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int s = lane + 32 * i;
      const float2 v = s < num_splits
                           ? __ldcg(reinterpret_cast<const float2*>(stats + (slot0 + s) * 2))
                           : make_float2(-INFINITY, 0.0f);
      m[i] = v.x;
      l[i] = v.y;
    }
    float mmax = fmaxf(m[0], m[1]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
    float lsum = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int s = lane + 32 * i;
      const float wt = m[i] == -INFINITY ? 0.0f : exp2f(m[i] - mmax);
      if (m[i] != -INFINITY) lsum += wt * l[i];
      if (s < num_splits) weight[h * num_splits + s] = wt;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
    if (lane == 0) {
      float f = v_scale / lsum;
      if (p.gate != nullptr) {
        f *= sigmoid_of_bf16(p.gate[t * p.gate_row_stride + head_first + h]);
      }
      factor[h] = f;
    }
  }
  __syncthreads();
  constexpr int kBatch = combine_batch();
  for (int idx = static_cast<int>(threadIdx.x); idx < heads * kChunks; idx += kThreads) {
    const int h = idx / kChunks, d0 = (idx % kChunks) * 4;
    const float* src = part + (local * p.num_heads + head_first + h) * num_splits * D + d0;
    const float* w = weight + h * num_splits;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < num_splits; s0 += kBatch) {
      float4 a[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        a[u] = s0 + u < num_splits
                   ? __ldcg(reinterpret_cast<const float4*>(src + int64_t{s0 + u} * D))
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (s0 + u >= num_splits) break;
        const float wt = w[s0 + u];
        o.x += wt * a[u].x;
        o.y += wt * a[u].y;
        o.z += wt * a[u].z;
        o.w += wt * a[u].w;
      }
    }
    const float f = factor[h];
    *reinterpret_cast<uint2*>(p.output + t * p.output_row_stride +
                              (head_first + h) * p.output_head_stride + d0) =
        make_uint2(pack_bf16x2(o.x * f, o.y * f), pack_bf16x2(o.z * f, o.w * f));
  }
}

}  // namespace step5::cuda::attn
