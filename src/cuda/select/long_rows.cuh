// Rows longer than the select kernel's list in its long-row instance
// (launches past select_long_columns(): 1M-token contexts have 131,072
// scores a row, read from HBM): one pass over the scores instead of two.
// A sample of the row gives a floor that about 2 K of its keys reach; the
// histogram pass then also lists every key at or above that floor, each
// warp for its own contiguous chunk of the row into its own share of the
// list (warp ballots and shuffles, no block barrier), so the shares in
// warp order are the row in index order. The list serves when the floor is
// at or below the threshold bin's and no share overflowed; otherwise the
// kernel takes its ordered pass as for any row.
#pragma once

#include <cstdint>

#include "cuda/heuristics.h"
#include "cuda/select/bins.h"
#include "cuda/select/threshold.cuh"

namespace step5::cuda {

// SelectShared::warp_end of a warp whose share of the list overflowed.
constexpr uint32_t select_share_overflow() {
  return 0xffffffffu;
}

// Bins the sampled blocks [b_begin, b_end) of a row of C scores (one block
// of 8 consecutive scores per select_sample_stride(), at
// select_sample_first(b)) into `hist` (zeroed).
template <int kThreads>
__device__ __forceinline__ void bin_sample(uint32_t* hist, const float* scores, int32_t C,
                                           int32_t b_begin, int32_t b_end, bool vector,
                                           uint32_t best) {
  static_assert(select_sample_stride() % 8 == 0, "blocks of 8 tile the stride");
  for (int32_t b = b_begin + static_cast<int32_t>(threadIdx.x); b < b_end; b += kThreads) {
    uint32_t key[8];
    load_keys<8>(scores, C, select_sample_first(b), vector, key);
#pragma unroll
    for (int k = 0; k < 8; ++k) atomicAdd(&hist[select_bin(key[k], best)], 1u);
  }
}

// The floor from the histogram of a row's whole sample (C / stride blocks):
// the floor of the bin where the sample's count from the top reaches 2 K x
// (sampled / C). The K-th key lies below it only when the sample held
// twice its share of the top K. Every thread calls it; uses sh.value.
template <int kThreads>
__device__ uint32_t sample_floor(SelectShared<kThreads>& sh, const uint32_t* hist, int32_t C,
                                 uint32_t best, uint32_t K) {
  const int32_t blocks = C / select_sample_stride();
  const uint64_t sampled = uint64_t{static_cast<uint32_t>(blocks)} * 8u;
  const uint64_t target =
      (2u * uint64_t{K} * sampled + static_cast<uint64_t>(C) - 1) / static_cast<uint64_t>(C);
  if (target == 0 || target > sampled) return 0u;  // too few samples: list every key
  using Scan = typename SelectShared<kThreads>::Scan;
  find_threshold_block<kThreads, select_bins(), Scan>(hist, static_cast<uint32_t>(target),
                                                      sh.cub.scan, &sh.value[0], &sh.value[1]);
  __syncthreads();
  const uint32_t floor = select_bin_floor(static_cast<int>(sh.value[0]), best);
  __syncthreads();  // sh.value is read before it is reused
  return floor;
}

// The floor of a row that one CTA reads whole. Uses sh.hist and sh.value.
template <int kThreads>
__device__ uint32_t sampled_floor(SelectShared<kThreads>& sh, const float* scores, int32_t C,
                                  bool vector, uint32_t best, uint32_t K) {
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  bin_sample<kThreads>(sh.hist, scores, C, 0, C / select_sample_stride(), vector, best);
  __syncthreads();
  return sample_floor<kThreads>(sh, sh.hist, C, best, K);
}

// The histogram of the row's distance bins (into sh.hist, zeroed) and, per
// warp, the keys >= `guess` of its chunk in index order into its share of
// `share` entries of the list (from warp * share on). Each warp's count
// goes to sh.warp_end[warp], or select_share_overflow() when its share
// overflowed (the warp then only bins).
template <int kThreads>
__device__ void bin_and_list(SelectShared<kThreads>& sh, const float* scores, int32_t C,
                             bool vector, uint32_t best, uint32_t guess, uint32_t* list_key,
                             int32_t* list_index, int32_t share) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kSpan = 32 * 8;  // scores per warp step
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t chunk = ((C + kWarps - 1) / kWarps + kSpan - 1) / kSpan * kSpan;
  const int32_t begin = min(C, warp * chunk), end = min(C, begin + chunk);
  uint32_t* const keys = list_key + warp * share;
  int32_t* const index = list_index + warp * share;
  uint32_t count = 0;
  bool full = false;
  uint32_t key[8];
  load_keys<8>(scores, end, begin + lane * 8, vector, key);
  for (int32_t base = begin; base < end; base += kSpan) {
    uint32_t next[8] = {};  // defined after the last step too (copied, not read)
    if (base + kSpan < end) load_keys<8>(scores, end, base + kSpan + lane * 8, vector, next);
    const int32_t i0 = base + lane * 8;
    uint32_t flags = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (i0 + k < end) {
        atomicAdd(&sh.hist[select_bin(key[k], best)], 1u);
        flags |= key[k] >= guess ? 1u << k : 0u;
      }
    }
    // The lanes' kept keys in index order: an exclusive scan of the counts.
    const uint32_t n = static_cast<uint32_t>(__popc(flags));
    const uint32_t inclusive = warp_inclusive_sum(n, lane);
    const uint32_t total = __shfl_sync(0xffffffffu, inclusive, 31);
    if (count + total > static_cast<uint32_t>(share)) full = true;
    if (!full) {
      uint32_t at = count + inclusive - n;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if ((flags >> k) & 1u) {
          keys[at] = key[k];
          index[at] = i0 + k;
          ++at;
        }
      }
      count += total;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) key[k] = next[k];
  }
  if (lane == 0) sh.warp_end[warp] = full ? select_share_overflow() : count;
}

// After bin_and_list and a barrier: turns the warps' counts into the end of
// each warp's entries in index order (prefix sums) and returns the entries,
// or -1 when a share overflowed. Every thread calls it; ends with a barrier.
template <int kThreads>
__device__ int32_t join_shares(SelectShared<kThreads>& sh) {
  constexpr int kWarps = kThreads / 32;
  if (threadIdx.x == 0) {
    uint32_t sum = 0;
    bool overflow = false;
    for (int w = 0; w < kWarps; ++w) {
      overflow = overflow || sh.warp_end[w] == select_share_overflow();
      sum += overflow ? 0u : sh.warp_end[w];
      sh.warp_end[w] = sum;
    }
    sh.value[3] = overflow ? select_share_overflow() : sum;
  }
  __syncthreads();
  const uint32_t entries = sh.value[3];
  __syncthreads();  // sh.value is read before it is reused
  return entries == select_share_overflow() ? -1 : static_cast<int32_t>(entries);
}

// The list position of entry i (in index order) of the joined shares.
template <int kThreads>
__device__ __forceinline__ int32_t share_slot(const SelectShared<kThreads>& sh, int32_t share,
                                              int32_t i) {
  constexpr int kWarps = kThreads / 32;
  int w = 0;
#pragma unroll
  for (int v = 0; v < kWarps - 1; ++v) w += static_cast<uint32_t>(i) >= sh.warp_end[v] ? 1 : 0;
  const uint32_t start = w == 0 ? 0u : sh.warp_end[w - 1];
  return w * share + (i - static_cast<int32_t>(start));
}

}  // namespace step5::cuda
