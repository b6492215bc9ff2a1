// The top K of one row's scores, by one CTA of the select kernel
// (select.cuh), on order keys (larger score, larger key):
//   1. a floor key at or below the row's K-th key, with a list of every
//      region at or above it (at most select_capacity()), in index order:
//      - rows of many regions first try a floor from a sample (one 16-byte
//        vector of every 128 bytes of scores), histogrammed in distance
//        bins below the row's best key: the floor of the bin where the
//        sample's count reaches its expected share of K plus a margin. One
//        ordered pass over the row keeps every region at or above it; when
//        that is fewer than K or more than the list holds, the sample was
//        not representative and the exact way below decides;
//      - else every score is histogrammed, and the floor is that of the bin
//        where the count from the top reaches K; then the same ordered pass;
//   2. the exact K-th key among the list (a histogram of the list, then
//      counting inside the threshold bin when it holds few keys, radix
//      passes otherwise), and how many regions equal to it are taken (the
//      lowest-indexed ones);
//   3. one ordered pass over the list writes the K regions ascending.
// Bins are a monotone function of the key, so every region of a higher bin
// beats every region of a lower one. When even the exact floor keeps more
// regions than the list holds (massive ties), four radix passes and one
// compaction over global memory decide instead.
//
// The sample replaces a histogram of every score (one shared atomic per
// score, most of the kernel's instructions) by one of an eighth of them and
// one of the list; the result is exact either way, as the floor is only
// used once the pass has shown at least K regions at or above it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/score_key.cuh"
#include "cuda/heuristics.h"
#include "cuda/select/bins.h"
#include "cuda/select/threshold.cuh"

namespace step5::cuda {

// One row's selection: its scores, the shared-memory list, its output.
struct RowTopK {
  const float* scores = nullptr;  // f32 [closed]; 16-byte aligned when `vector`
  int32_t closed = 0;             // C > topk
  int32_t topk = 0;               // K
  uint32_t best = 0;              // the row's best order key
  bool vector = false;            // scores may be read as float4
  uint32_t* list_key = nullptr;   // [capacity] keys of the kept regions
  int32_t* list_index = nullptr;  // [capacity] their regions
  int32_t capacity = 0;           // entries the list holds; one more is the
                                  // sink of keep_ordered's overflow
  int32_t* out = nullptr;         // i32 [topk]: the regions, ascending
};

// Loads the keys of scores [i0, i0 + kItems) of a row of length C (beyond C:
// key 0, not to be counted).
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

// The bin where the count from the top of sh.hist reaches `need` (the
// histogram holds at least `need`) and the count above it, for every
// thread.
template <int kThreads>
__device__ __forceinline__ void threshold_of(SelectShared<kThreads>& sh, uint32_t need,
                                             int& threshold, uint32_t& above) {
  find_threshold_block<kThreads, select_bins(), typename SelectShared<kThreads>::Scan>(
      sh.hist, need, sh.cub.scan, &sh.value[0], &sh.value[1]);
  __syncthreads();
  threshold = static_cast<int>(sh.value[0]);
  above = sh.value[1];
}

// Histogram of every score of the row in distance bins below its best
// key; the next step's scores are loaded before this step's are binned.
// Equal bins within a warp serialize: rows of tied scores bin slower, not
// wrongly.
template <int kThreads>
__device__ void histogram_row(SelectShared<kThreads>& sh, const RowTopK& r) {
  constexpr int kItems = select_items();
  constexpr int kStep = kThreads * kItems;
  const int32_t mine = static_cast<int32_t>(threadIdx.x) * kItems;
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  uint32_t key[kItems];
  load_keys<kItems>(r.scores, r.closed, mine, r.vector, key);
  for (int32_t base = 0; base < r.closed; base += kStep) {
    uint32_t next[kItems] = {};  // defined after the last step too (copied, not read)
    if (base + kStep < r.closed)
      load_keys<kItems>(r.scores, r.closed, base + kStep + mine, r.vector, next);
    // Whole steps (all but the last) bin without bounds checks.
    auto bin_step = [&](auto whole) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if (decltype(whole)::value || base + mine + k < r.closed) {
          atomicAdd(&sh.hist[select_bin(key[k], r.best)], 1u);
        }
      }
    };
    if (base + kStep <= r.closed) {
      bin_step(std::true_type{});
    } else {
      bin_step(std::false_type{});
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) key[k] = next[k];
  }
  __syncthreads();
}

// A floor from the row's sample (regions 32 i .. 32 i + 3), or false when
// the row is not sampled (select_sample_need). The same for every thread.
template <int kThreads>
__device__ bool sampled_floor(SelectShared<kThreads>& sh, const RowTopK& r, uint32_t& floor_key) {
  const int32_t samples = select_sample_count(r.closed);
  const int32_t need = select_sample_need(r.topk, samples, r.closed, r.capacity);
  if (need <= 0) return false;
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  for (int32_t i = threadIdx.x; 32 * i < r.closed; i += kThreads) {
    uint32_t key[4];
    load_keys<4>(r.scores, r.closed, 32 * i, r.vector, key);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (32 * i + k < r.closed) atomicAdd(&sh.hist[select_bin(key[k], r.best)], 1u);
    }
  }
  __syncthreads();
  int threshold = 0;
  uint32_t above = 0;
  threshold_of(sh, static_cast<uint32_t>(need), threshold, above);
  floor_key = select_bin_floor(threshold, r.best);
  return true;
}

// Order bits of a score without score_key's merge of -0 into +0 (two
// instructions instead of four; only -0 differs, 0x7fffffff instead of
// 0x80000000).
__device__ __forceinline__ uint32_t raw_order(uint32_t bits) {
  return bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
}

// The bits of scores [i0, i0 + kItems) of a row of length C (beyond C: 0,
// not to be counted).
template <int kItems>
__device__ __forceinline__ void load_bits(const float* scores, int32_t C, int32_t i0, bool vector,
                                          uint32_t (&bits)[kItems]) {
  if (vector && i0 + kItems <= C) {
#pragma unroll
    for (int v = 0; v < kItems / 4; ++v) {
      const uint4 x = *reinterpret_cast<const uint4*>(scores + i0 + 4 * v);
      bits[4 * v] = x.x;
      bits[4 * v + 1] = x.y;
      bits[4 * v + 2] = x.z;
      bits[4 * v + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kItems; ++k) bits[k] = i0 + k < C ? __float_as_uint(scores[i0 + k]) : 0u;
  }
}

// The ordered pass: every region with a key >= floor_key goes to the list,
// in index order, while the list has room (entries past r.capacity land on
// the sink entry r.capacity). Returns how many regions have such a key
// (also those that did not fit), the same for every thread. Keys are
// compared as raw order bits (a floor of exactly +0 compares as -0's, so -0
// is kept with +0) and only the kept ones become score keys: the pass is
// ~3 instructions per score where most are not kept.
template <int kThreads>
__device__ uint32_t keep_ordered(SelectShared<kThreads>& sh, const RowTopK& r, uint32_t floor_key) {
  using Scan = typename SelectShared<kThreads>::Scan;
  constexpr int kItems = select_items();
  constexpr int kStep = kThreads * kItems;
  const int32_t mine = static_cast<int32_t>(threadIdx.x) * kItems;
  const uint32_t floor_raw = floor_key == 0x80000000u ? 0x7fffffffu : floor_key;
  const auto sink = static_cast<uint32_t>(r.capacity);
  uint32_t carry = 0;
  uint32_t bits[kItems];
  load_bits<kItems>(r.scores, r.closed, mine, r.vector, bits);
  for (int32_t base = 0; base < r.closed; base += kStep) {
    uint32_t next[kItems] = {};  // defined after the last step too (copied, not read)
    if (base + kStep < r.closed) {
      load_bits<kItems>(r.scores, r.closed, base + kStep + mine, r.vector, next);
    }
    const int32_t valid = r.closed - (base + mine);  // items of this thread inside the row
    uint32_t flags = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      flags |= (k < valid && raw_order(bits[k]) >= floor_raw) ? 1u << k : 0u;
    }
    uint32_t before = 0, total = 0;
    __syncthreads();  // the scan storage is reused
    Scan(sh.cub.scan).ExclusiveSum(static_cast<uint32_t>(__popc(flags)), before, total);
    if (flags != 0) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if ((flags >> k) & 1u) {
          const uint32_t at = min(carry + before, sink);
          r.list_key[at] = score_key(__uint_as_float(bits[k]));
          r.list_index[at] = base + mine + k;
          ++before;
        }
      }
    }
    carry += total;
#pragma unroll
    for (int k = 0; k < kItems; ++k) bits[k] = next[k];
  }
  __syncthreads();  // the list is complete
  return carry;
}

// Stable compaction: region j goes to (#keys > kth before j) +
// min(#keys == kth before j, need). Counts are packed gt << 16 | eq per
// step (at most kThreads per step) and carried across steps. `entry(i)`
// gives the key and region of entry i < entries, in region order.
template <int kThreads, class Entry>
__device__ void emit_top_k(SelectShared<kThreads>& sh, const RowTopK& r, uint32_t kth,
                           uint32_t need, int32_t entries, Entry entry) {
  using Scan = typename SelectShared<kThreads>::Scan;
  uint32_t carry_gt = 0, carry_eq = 0;
  for (int32_t base = 0; base < entries; base += kThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    uint32_t key = 0;
    int32_t j = -1;
    if (i < entries) entry(i, key, j);
    const uint32_t flags = i >= entries ? 0u : key > kth ? (1u << 16) : key == kth ? 1u : 0u;
    uint32_t exclusive = 0, total = 0;
    __syncthreads();
    Scan(sh.cub.scan).ExclusiveSum(flags, exclusive, total);
    const uint32_t gt_before = carry_gt + (exclusive >> 16);
    const uint32_t eq_before = carry_eq + (exclusive & 0xffffu);
    if ((flags >> 16) != 0 || ((flags & 1u) != 0 && eq_before < need)) {
      r.out[gt_before + min(eq_before, need)] = j;
    }
    carry_gt += total >> 16;
    carry_eq += total & 0xffffu;
  }
}

// The row's top K into r.out (C > K).
template <int kThreads>
__device__ void select_top_k(SelectShared<kThreads>& sh, const RowTopK& r) {
  const auto K = static_cast<uint32_t>(r.topk);
  const auto capacity = static_cast<uint32_t>(r.capacity);
  // 1. A floor and the list of every region at or above it.
  int32_t entries = -1;  // -1: the list could not hold them
  int threshold = 0;
  uint32_t above = 0, in_bin = 0;
  bool have_threshold = false;  // threshold, above and in_bin are the row's
  uint32_t floor_key = 0;
  if (sampled_floor(sh, r, floor_key)) {
    const uint32_t kept = keep_ordered(sh, r, floor_key);
    if (kept >= K && kept <= capacity) entries = static_cast<int32_t>(kept);
  }
  if (entries < 0) {
    histogram_row(sh, r);
    threshold_of(sh, K, threshold, above);
    in_bin = sh.hist[threshold];
    if (above + in_bin <= capacity) {
      entries = static_cast<int32_t>(keep_ordered(sh, r, select_bin_floor(threshold, r.best)));
      have_threshold = true;
    }
  }

  uint32_t kth = 0, need = K;
  if (entries >= 0) {
    // 2. The K-th key among the list: the threshold bin (from the list's
    // histogram, unless the row's was taken), and the exact key among that
    // bin's candidates.
    if (!have_threshold) {
      for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
      __syncthreads();
      for (int32_t i = threadIdx.x; i < entries; i += kThreads) {
        atomicAdd(&sh.hist[select_bin(r.list_key[i], r.best)], 1u);
      }
      __syncthreads();
      threshold_of(sh, K, threshold, above);
      in_bin = sh.hist[threshold];
    }
    __syncthreads();  // every thread read the histogram (reused below)
    need = K - above;
    auto candidates = [&](auto&& visit) {
      for (int32_t i = threadIdx.x; i < entries; i += kThreads) {
        const uint32_t key = r.list_key[i];
        if (select_bin(key, r.best) == threshold) visit(key);
      }
    };
    if (in_bin <= static_cast<uint32_t>(select_few())) {
      kth = kth_among_few<kThreads>(sh, need, candidates);
    } else {
      kth = radix_select<kThreads>(sh, need, candidates);
    }
    // 3. The K regions, ascending.
    emit_top_k(sh, r, kth, need, entries, [&](int32_t i, uint32_t& key, int32_t& j) {
      key = r.list_key[i];
      j = r.list_index[i];
    });
    return;
  }
  // Massive ties: exact radix select over all of the row's keys in global
  // memory (need counts from the top of the whole row), then the
  // compaction over them.
  constexpr int kItems = select_items();
  constexpr int kStep = kThreads * kItems;
  const int32_t mine = static_cast<int32_t>(threadIdx.x) * kItems;
  kth = radix_select<kThreads>(sh, need, [&](auto&& visit) {
    for (int32_t base = 0; base < r.closed; base += kStep) {
      uint32_t key[kItems];
      load_keys<kItems>(r.scores, r.closed, base + mine, r.vector, key);
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if (base + mine + k < r.closed) visit(key[k]);
      }
    }
  });
  emit_top_k(sh, r, kth, need, r.closed, [&](int32_t j, uint32_t& key, int32_t& region) {
    key = score_key(r.scores[j]);
    region = j;
  });
}

}  // namespace step5::cuda
