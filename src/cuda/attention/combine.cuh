// Split-KV combine: merges the fp32 partials (m, l, acc) of a row's
// splits, applies v_scale and the sigmoid gate, and rounds once to bf16.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/launch.h"
#include "cuda/attention/paged_kernel.cuh"

namespace step5::cuda::attn {

// One CTA per (row, group of combine_heads() heads); each thread covers 8
// values of one head, so a decode step of few rows still spreads over many
// SMs. Scratch layout (written by paged_attention_kernel): acc f32
// [rows, H, S, D], then stats f32 [rows, H, S, 2] = (m in log2 units, l).
template <int D>
__global__ void __launch_bounds__(combine_threads())
    combine_splits_kernel(const PagedAttentionParams p, int num_splits, float v_scale) {
  const int64_t local = blockIdx.x;
  const int64_t t = p.row_begin + local;
  const float* part = static_cast<const float*>(p.scratch);
  const float* stats = part + p.num_rows * p.num_heads * num_splits * int64_t{D};
  const int first = static_cast<int>(blockIdx.y) * combine_heads() * (D / 8);
  const int last = min(p.num_heads, (static_cast<int>(blockIdx.y) + 1) * combine_heads()) * (D / 8);
  for (int idx = first + static_cast<int>(threadIdx.x); idx < last; idx += combine_threads()) {
    const int head = idx / (D / 8);
    const int d0 = (idx % (D / 8)) * 8;
    const int64_t slot0 = (local * p.num_heads + head) * num_splits;
    float mmax = -INFINITY;
    for (int s = 0; s < num_splits; ++s) mmax = fmaxf(mmax, stats[(slot0 + s) * 2]);
    float lsum = 0.0f;
    float o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int s = 0; s < num_splits; ++s) {
      const float ms = stats[(slot0 + s) * 2];
      if (ms == -INFINITY) continue;  // an empty split
      const float wt = exp2f(ms - mmax);
      lsum += wt * stats[(slot0 + s) * 2 + 1];
      const float4 a = *reinterpret_cast<const float4*>(part + (slot0 + s) * D + d0);
      const float4 b = *reinterpret_cast<const float4*>(part + (slot0 + s) * D + d0 + 4);
      o[0] += wt * a.x;
      o[1] += wt * a.y;
      o[2] += wt * a.z;
      o[3] += wt * a.w;
      o[4] += wt * b.x;
      o[5] += wt * b.y;
      o[6] += wt * b.z;
      o[7] += wt * b.w;
    }
    float f = v_scale / lsum;
    if (p.gate != nullptr) f *= sigmoid_of_bf16(p.gate[t * p.gate_row_stride + head]);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] *= f;
    store_bf16x8(p.output + t * p.output_row_stride + head * p.output_head_stride + d0, o);
  }
}

}  // namespace step5::cuda::attn
