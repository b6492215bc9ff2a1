// One CTA per (row, group). With C <= K closed regions the row takes all of
// them. Otherwise an exact radix select finds the K-th largest score key
// (four 8-bit histogram passes in shared memory over order-preserving
// uint keys), and one stable compaction in index order writes every region
// above it plus the lowest-indexed regions equal to it: the output is
// ascending and ties go to the lower index, as the reference's stable sort.
#pragma once

#include <cub/block/block_scan.cuh>

#include "cuda/heuristics.h"
#include "cuda/select/params.h"

namespace step5::cuda {

// Larger float -> larger key. +0 and -0 compare equal as floats, so both
// map to the key of +0 (a relu'd score of 0 can come out as either sign).
__device__ __forceinline__ uint32_t score_key(float x) {
  uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) select_kernel(SelectParams p) {
  constexpr int kBins = 1 << select_radix_bits();
  constexpr int kBinsPerLane = kBins / 32;
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ uint32_t hist[kBins];
  __shared__ uint32_t shared_prefix, shared_need;
  __shared__ uint32_t carry_gt, carry_eq;

  const int64_t local_row = blockIdx.x;
  const int g = blockIdx.y;
  int32_t request = 0, position = 0;
  row_of(p.rows, p.row_begin + local_row, request, position);
  const int32_t closed = position / 8;
  int32_t* out = p.selected + local_row * p.selected_stride_t + g * p.selected_stride_g;
  if (closed <= p.topk) {
    for (int32_t i = threadIdx.x; i < p.topk; i += kThreads) out[i] = i < closed ? i : -1;
    return;
  }
  const float* scores = p.scores + local_row * p.scores_stride_t + g * p.scores_stride_g;

  // Radix select, most significant digit first: `prefix` holds the digits
  // of the K-th key found so far, `need` how many keys with that prefix
  // still belong to the top K.
  uint32_t prefix = 0, need = static_cast<uint32_t>(p.topk);
  for (int shift = 32 - select_radix_bits(); shift >= 0; shift -= select_radix_bits()) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) hist[b] = 0;
    __syncthreads();
    const uint32_t high_mask =
        shift + select_radix_bits() >= 32 ? 0u : ~0u << (shift + select_radix_bits());
    for (int32_t j = threadIdx.x; j < closed; j += kThreads) {
      const uint32_t key = score_key(scores[j]);
      if ((key & high_mask) == prefix) atomicAdd(&hist[(key >> shift) & (kBins - 1)], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns bins from the top: kBins-1-l*kBinsPerLane downwards.
      const int lane = threadIdx.x;
      uint32_t local = 0;
#pragma unroll
      for (int k = 0; k < kBinsPerLane; ++k) local += hist[kBins - 1 - lane * kBinsPerLane - k];
      uint32_t inclusive = local;
#pragma unroll
      for (int offset = 1; offset < 32; offset *= 2) {
        const uint32_t up = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += up;
      }
      const uint32_t before = inclusive - local;  // keys in higher bins than this lane's
      if (before < need && inclusive >= need) {
        uint32_t above = before;
        for (int k = 0; k < kBinsPerLane; ++k) {
          const int bin = kBins - 1 - lane * kBinsPerLane - k;
          if (above + hist[bin] >= need) {
            shared_prefix = prefix | (static_cast<uint32_t>(bin) << shift);
            shared_need = need - above;
            break;
          }
          above += hist[bin];
        }
      }
    }
    __syncthreads();
    prefix = shared_prefix;
    need = shared_need;
  }

  // Stable compaction: position of region j = (#keys > kth before j) +
  // min(#keys == kth before j, need). Counts are packed gt << 16 | eq per
  // tile (at most kThreads < 2^16 each), carried across tiles.
  if (threadIdx.x == 0) carry_gt = carry_eq = 0;
  __syncthreads();
  for (int32_t base = 0; base < closed; base += kThreads) {
    const int32_t j = base + threadIdx.x;
    uint32_t flags = 0;
    if (j < closed) {
      const uint32_t key = score_key(scores[j]);
      flags = key > prefix ? (1u << 16) : key == prefix ? 1u : 0u;
    }
    uint32_t exclusive = 0, total = 0;
    Scan(scan_storage).ExclusiveSum(flags, exclusive, total);
    const uint32_t gt_before = carry_gt + (exclusive >> 16);
    const uint32_t eq_before = carry_eq + (exclusive & 0xffffu);
    if ((flags >> 16) != 0 || ((flags & 1u) != 0 && eq_before < need)) {
      out[gt_before + min(eq_before, need)] = j;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      carry_gt += total >> 16;
      carry_eq += total & 0xffffu;
    }
    __syncthreads();
  }
}

}  // namespace step5::cuda
