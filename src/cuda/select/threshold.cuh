// How the select kernel (select.cuh) reads a row's order keys and finds its
// K-th key: the threshold bin (bins.h) where the count from the top reaches
// K, and the exact K-th key among a set of candidates (counting when they
// are few, radix passes otherwise).
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "cuda/common/score_key.cuh"
#include "cuda/heuristics.h"
#include "cuda/select/bins.h"

namespace step5::cuda {

template <int kThreads>
struct SelectShared {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } cub;
  uint32_t hist[select_bins()];
  uint32_t value[4];                 // broadcast slots
  uint32_t warp_end[kThreads / 32];  // long rows: each warp's share of the list (long_rows.cuh)
};

// Loads the keys of scores [i0, i0 + kItems) of a row of length C (beyond C:
// key 0 with valid = false).
template <int kItems>
__device__ __forceinline__ void load_keys(const float* scores, int32_t C, int32_t i0, bool vector,
                                          uint32_t (&key)[kItems]) {
  if (vector && i0 + kItems <= C) {
#pragma unroll
    for (int v = 0; v < kItems / 4; ++v) {
      const float4 x = *reinterpret_cast<const float4*>(scores + i0 + 4 * v);
      key[4 * v] = score_key(x.x);
      key[4 * v + 1] = score_key(x.y);
      key[4 * v + 2] = score_key(x.z);
      key[4 * v + 3] = score_key(x.w);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kItems; ++k) key[k] = i0 + k < C ? score_key(scores[i0 + k]) : 0u;
  }
}

// The sum of `x` over lanes 0..lane of the (full) warp.
__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t x, int lane) {
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const uint32_t up = __shfl_up_sync(0xffffffffu, x, offset);
    if (lane >= offset) x += up;
  }
  return x;
}

// The bin among `count` consecutive bins from `top` downwards where the
// running count, `above` before `top`, reaches `need`; written with the count
// above it. Called by the one thread whose bins hold the crossing.
__device__ __forceinline__ void write_crossing(const uint32_t* hist, int top, int count,
                                               uint32_t above, uint32_t need, uint32_t* out_bin,
                                               uint32_t* out_above) {
  for (int k = 0; k < count; ++k) {
    const int bin = top - k;
    if (bin < 0) break;
    if (above + hist[bin] >= need) {
      *out_bin = static_cast<uint32_t>(bin);
      *out_above = above;
      break;
    }
    above += hist[bin];
  }
}

// Warp 0 finds, over 2^bits bins counted from the top, the bin where the
// running count reaches `need`; writes the bin and the count above it.
template <int kBins>
__device__ __forceinline__ void find_threshold(const uint32_t* hist, uint32_t need,
                                               uint32_t* out_bin, uint32_t* out_above) {
  constexpr int kPerLane = (kBins + 31) / 32;
  const int lane = threadIdx.x;
  uint32_t local = 0;
  for (int k = 0; k < kPerLane; ++k) {
    const int bin = kBins - 1 - lane * kPerLane - k;
    if (bin >= 0) local += hist[bin];
  }
  const uint32_t inclusive = warp_inclusive_sum(local, lane);
  const uint32_t before = inclusive - local;
  if (before < need && inclusive >= need) {
    write_crossing(hist, kBins - 1 - lane * kPerLane, kPerLane, before, need, out_bin, out_above);
  }
}

// All threads find, over kBins bins counted from the top, the bin where the
// running count reaches `need` (one block scan; a serial walk by one warp
// left the other warps waiting at the next barrier); writes the bin and
// the count above it.
template <int kThreads, int kBins, class Scan>
__device__ __forceinline__ void find_threshold_block(const uint32_t* hist, uint32_t need,
                                                     typename Scan::TempStorage& storage,
                                                     uint32_t* out_bin, uint32_t* out_above) {
  constexpr int kPer = (kBins + kThreads - 1) / kThreads;
  const int top = kBins - 1 - static_cast<int>(threadIdx.x) * kPer;
  uint32_t local = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) local += top - k >= 0 ? hist[top - k] : 0u;
  uint32_t before = 0;
  Scan(storage).ExclusiveSum(local, before);
  if (before < need && before + local >= need) {
    write_crossing(hist, top, kPer, before, need, out_bin, out_above);
  }
}

// The threshold bin of a histogram in sh.hist: the bin where the count from
// the top reaches K, how many keys it holds, and how many of them belong
// to the top K. Every thread calls it; ends with a barrier, after which
// sh.value and sh.hist may be reused.
struct ThresholdBin {
  int bin;
  uint32_t in_bin;
  uint32_t need;
};
template <int kThreads>
__device__ ThresholdBin threshold_bin(SelectShared<kThreads>& sh, uint32_t K) {
  using Scan = typename SelectShared<kThreads>::Scan;
  find_threshold_block<kThreads, select_bins(), Scan>(sh.hist, K, sh.cub.scan, &sh.value[0],
                                                      &sh.value[1]);
  __syncthreads();
  ThresholdBin t;
  t.bin = static_cast<int>(sh.value[0]);
  t.in_bin = sh.hist[t.bin];
  t.need = K - sh.value[1];
  __syncthreads();
  return t;
}

// Radix select of the need-th largest key among the keys `for_each` visits
// (MSB first, 8-bit digits). Returns the key; `need` becomes how many keys
// equal to it belong to the top.
template <int kThreads, class ForEach>
__device__ uint32_t radix_select(SelectShared<kThreads>& sh, uint32_t& need, ForEach for_each) {
  constexpr int kRadix = 1 << select_radix_bits();
  uint32_t prefix = 0;
  for (int shift = 32 - select_radix_bits(); shift >= 0; shift -= select_radix_bits()) {
    for (int b = threadIdx.x; b < kRadix; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    const uint32_t high_mask =
        shift + select_radix_bits() >= 32 ? 0u : ~0u << (shift + select_radix_bits());
    for_each([&](uint32_t key) {
      if ((key & high_mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & (kRadix - 1)], 1u);
    });
    __syncthreads();
    if (threadIdx.x < 32) find_threshold<kRadix>(sh.hist, need, &sh.value[0], &sh.value[1]);
    __syncthreads();
    prefix |= sh.value[0] << shift;
    need -= sh.value[1];
    __syncthreads();
  }
  return prefix;
}

// The need-th largest key among the few keys `for_each` visits (at most
// select_few()), by counting: each key learns how many others are larger
// and equal, and the first of the keys where the count reaches `need`
// reports. One pass instead of four radix passes, each of which waited on
// one warp. Returns the key; `need` becomes how many keys equal to it
// belong to the top. Uses sh.hist (the histogram must have been read).
template <int kThreads, class ForEach>
__device__ uint32_t kth_among_few(SelectShared<kThreads>& sh, uint32_t& need, ForEach for_each) {
  uint32_t* few = sh.hist;
  static_assert(select_few() <= select_bins(), "the keys are gathered into the histogram");
  if (threadIdx.x == 0) sh.value[2] = 0;
  __syncthreads();
  for_each([&](uint32_t key) { few[atomicAdd(&sh.value[2], 1u)] = key; });
  __syncthreads();
  const uint32_t m = sh.value[2];
  for (uint32_t i = threadIdx.x; i < m; i += kThreads) {
    const uint32_t c = few[i];
    uint32_t greater = 0, equal = 0, equal_before = 0;
    for (uint32_t j = 0; j < m; ++j) {
      const uint32_t x = few[j];
      greater += x > c ? 1u : 0u;
      equal += x == c ? 1u : 0u;
      equal_before += x == c && j < i ? 1u : 0u;
    }
    if (equal_before == 0 && greater < need && greater + equal >= need) {
      sh.value[0] = c;
      sh.value[1] = greater;
    }
  }
  __syncthreads();
  const uint32_t kth = sh.value[0];
  need -= sh.value[1];
  __syncthreads();
  return kth;
}

// The need-th largest key among the `in_bin` keys `for_each` visits (a
// threshold bin's): by counting when they are few, else by radix passes.
// `need` becomes how many keys equal to it belong to the top.
template <int kThreads, class ForEach>
__device__ uint32_t kth_in_bin(SelectShared<kThreads>& sh, uint32_t in_bin, uint32_t& need,
                               ForEach for_each) {
  return in_bin <= static_cast<uint32_t>(select_few()) ? kth_among_few<kThreads>(sh, need, for_each)
                                                       : radix_select<kThreads>(sh, need, for_each);
}

}  // namespace step5::cuda
