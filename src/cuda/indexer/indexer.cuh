// One CTA per (row, tile of 64 regions). The row's index queries for all G
// groups and I heads sit in shared memory as fp32, so every summary is read
// from the cache once per token and reused for all G*I dot products. One
// warp per region: lane l owns values [c*256 + 8l, +8) of chunk c.
#pragma once

#include <math_constants.h>

#include "cuda/common/numerics.cuh"
#include "cuda/heuristics.h"
#include "cuda/indexer/params.h"

namespace step5::cuda {

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <class Storage>
__device__ __forceinline__ void load_summary(const char* src, int d, float (&s)[8]) {
  if constexpr (Storage::kFp8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(src + d);
    const uint8_t* b = reinterpret_cast<const uint8_t*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) s[e] = fp8_bits_to_float(b[e]);
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(src + 2 * d);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) s[e] = bf16_bits_to_float(h[e]);
  }
}

template <class Storage>
__global__ void indexer_kernel(IndexerParams p) {
  extern __shared__ float smem[];
  const int gi = p.num_groups * p.index_heads;
  float* q = smem;                     // [G*I, Di]
  float* w = smem + gi * p.index_dim;  // [G*I]
  const int64_t local_row = blockIdx.x;
  const int64_t t = p.row_begin + local_row;
  int32_t request = 0, position = 0;
  row_of(p.rows, t, request, position);
  const int32_t closed = position / 8;
  if (closed <= p.skip_topk) return;
  const int32_t tile_begin = static_cast<int32_t>(blockIdx.y) * indexer_regions_per_cta();
  const int32_t tile_end = min(tile_begin + indexer_regions_per_cta(), p.columns);
  float* out = p.scores + local_row * p.scores_stride_t;

  if (tile_begin >= closed) {
    if (!p.fill_tail) return;
    for (int i = threadIdx.x; i < p.num_groups * (tile_end - tile_begin); i += blockDim.x) {
      const int g = i / (tile_end - tile_begin);
      out[g * p.scores_stride_g + tile_begin + i % (tile_end - tile_begin)] = -CUDART_INF_F;
    }
    return;
  }

  for (int i = threadIdx.x; i < gi * (p.index_dim / 8); i += blockDim.x) {
    const int gh = i / (p.index_dim / 8);
    const int d = (i % (p.index_dim / 8)) * 8;
    const int g = gh / p.index_heads, h = gh % p.index_heads;
    const uint4 raw = *reinterpret_cast<const uint4*>(
        p.index_query + t * p.query_stride_t + g * p.query_stride_g + h * p.query_stride_h + d);
    const uint16_t* b = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) q[gh * p.index_dim + d + e] = bf16_bits_to_float(b[e]);
  }
  for (int i = threadIdx.x; i < gi; i += blockDim.x) {
    w[i] = p.index_weight[t * p.weight_stride_t + (i / p.index_heads) * p.weight_stride_g +
                          i % p.index_heads];
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunks = (p.index_dim + 255) / 256;
  const int32_t* table = p.block_table + request * p.block_table_stride;
  const int regions_per_block = p.block_size / 8;
  for (int32_t j = tile_begin + warp; j < tile_end; j += indexer_warps()) {
    if (j >= closed) {
      if (p.fill_tail) {
        for (int g = lane; g < p.num_groups; g += 32)
          out[g * p.scores_stride_g + j] = -CUDART_INF_F;
      }
      continue;
    }
    const int64_t block =
        column_ok(p.guard, j / regions_per_block) ? __ldg(table + j / regions_per_block) : -1;
    if (!block_ok(p.guard, block)) {
      // Out of the table or the cache: the region scores as zeros.
      if (lane == 0) report_fault(p.guard, DeviceFault::summary_block, request, block);
      for (int g = lane; g < p.num_groups; g += 32) out[g * p.scores_stride_g + j] = 0.0f;
      continue;
    }
    const char* src = static_cast<const char*>(p.summaries) + block * p.summary_block_stride +
                      (j % regions_per_block) * p.summary_region_stride;
    float s[indexer_max_chunks()][8];
#pragma unroll
    for (int c = 0; c < indexer_max_chunks(); ++c) {
      const int d = c * 256 + lane * 8;
      if (c < chunks && d < p.index_dim) {
        load_summary<Storage>(src, d, s[c]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) s[c][e] = 0.0f;
      }
    }
    for (int g = 0; g < p.num_groups; ++g) {
      float score = 0.0f;
      for (int h = 0; h < p.index_heads; ++h) {
        const float* qh = q + (g * p.index_heads + h) * p.index_dim;
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < indexer_max_chunks(); ++c) {
          const int d = c * 256 + lane * 8;
          if (c < chunks && d < p.index_dim) {
            const float4 a = *reinterpret_cast<const float4*>(qh + d);
            const float4 b = *reinterpret_cast<const float4*>(qh + d + 4);
            dot += a.x * s[c][0] + a.y * s[c][1] + a.z * s[c][2] + a.w * s[c][3];
            dot += b.x * s[c][4] + b.y * s[c][5] + b.z * s[c][6] + b.w * s[c][7];
          }
        }
        dot = warp_sum(dot);
        score += w[g * p.index_heads + h] * fmaxf(dot, 0.0f);
      }
      if (lane == 0) out[g * p.scores_stride_g + j] = score;
    }
  }
}

}  // namespace step5::cuda
