// Passes of the select kernels (select.cuh, cluster_rows.cuh) over a row's
// scores or its kept list, each by the whole CTA: the ordered listing of
// the keys at or above a floor, the stable compaction that writes the K
// selected regions ascending, and the massive-ties fallback that does both
// over the row in global memory.
#pragma once

#include <cstdint>

#include "cuda/heuristics.h"
#include "cuda/select/threshold.cuh"

namespace step5::cuda {

// Lists every key >= `floor_key` of scores [0, C) with its index, in index
// order, into list_key / list_index (the caller knows they fit); returns
// how many. Every thread calls it.
template <int kThreads>
__device__ int32_t list_at_or_above(SelectShared<kThreads>& sh, const float* scores, int32_t C,
                                    bool vector, uint32_t floor_key, uint32_t* list_key,
                                    int32_t* list_index) {
  constexpr int kItems = select_items();
  constexpr int kStep = kThreads * kItems;
  using Scan = typename SelectShared<kThreads>::Scan;
  const int32_t mine = static_cast<int32_t>(threadIdx.x) * kItems;
  uint32_t carry = 0;
  uint32_t key[kItems];
  load_keys<kItems>(scores, C, mine, vector, key);
  for (int32_t base = 0; base < C; base += kStep) {
    uint32_t next[kItems] = {};  // defined after the last step too (copied, not read)
    if (base + kStep < C) load_keys<kItems>(scores, C, base + kStep + mine, vector, next);
    uint32_t flags = 0, count = 0;
    const bool whole = base + kStep <= C;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const bool keep = (whole || base + mine + k < C) && key[k] >= floor_key;
      flags |= keep ? 1u << k : 0u;
      count += keep ? 1u : 0u;
    }
    uint32_t before = 0, total = 0;
    __syncthreads();  // the scan storage is reused
    Scan(sh.cub.scan).ExclusiveSum(count, before, total);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if ((flags >> k) & 1u) {
        list_key[carry + before] = key[k];
        list_index[carry + before] = base + mine + k;
        ++before;
      }
    }
    carry += total;
#pragma unroll
    for (int k = 0; k < kItems; ++k) key[k] = next[k];
  }
  return static_cast<int32_t>(carry);
}

// Stable compaction, kThreads keys a step in index order: region j goes to
// out[(#keys > kth before j) + min(#keys == kth before j, need)] when it is
// selected. Counts are packed gt << 16 | eq per step (at most kThreads <
// 2^16 each) and carried across steps. Every thread calls emit.
template <int kThreads>
struct StableCompaction {
  SelectShared<kThreads>& sh;
  int32_t* out;
  uint32_t kth;
  uint32_t need;
  uint32_t carry_gt = 0;
  uint32_t carry_eq = 0;

  __device__ __forceinline__ void emit(uint32_t key, int32_t j, bool valid) {
    using Scan = typename SelectShared<kThreads>::Scan;
    const uint32_t flags = !valid ? 0u : key > kth ? (1u << 16) : key == kth ? 1u : 0u;
    uint32_t exclusive = 0, total = 0;
    __syncthreads();
    Scan(sh.cub.scan).ExclusiveSum(flags, exclusive, total);
    const uint32_t gt_before = carry_gt + (exclusive >> 16);
    const uint32_t eq_before = carry_eq + (exclusive & 0xffffu);
    if ((flags >> 16) != 0 || ((flags & 1u) != 0 && eq_before < need)) {
      out[gt_before + min(eq_before, need)] = j;
    }
    carry_gt += total >> 16;
    carry_eq += total & 0xffffu;
  }
};

// Massive ties (the threshold bin's candidates overflow every list): the
// exact K-th key by radix passes over all of the row's keys in global
// memory, then the compaction over the row. Every thread calls it.
template <int kThreads>
__device__ void select_over_row(SelectShared<kThreads>& sh, const float* scores, int32_t C,
                                bool vector, uint32_t K, int32_t* out) {
  constexpr int kItems = select_items();
  constexpr int kStep = kThreads * kItems;
  const int32_t mine = static_cast<int32_t>(threadIdx.x) * kItems;
  uint32_t need = K;
  const uint32_t kth = radix_select<kThreads>(sh, need, [&](auto&& visit) {
    for (int32_t base = 0; base < C; base += kStep) {
      uint32_t key[kItems];
      load_keys<kItems>(scores, C, base + mine, vector, key);
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if (base + mine + k < C) visit(key[k]);
      }
    }
  });
  StableCompaction<kThreads> compaction{sh, out, kth, need};
  for (int32_t base = 0; base < C; base += kThreads) {
    const int32_t j = base + static_cast<int32_t>(threadIdx.x);
    const bool valid = j < C;
    compaction.emit(valid ? score_key(scores[j]) : 0u, j, valid);
  }
}

}  // namespace step5::cuda
