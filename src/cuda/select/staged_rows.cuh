// Selection of launches of many (row, group) selections of long rows that
// fit in shared memory (prefill chunks at long contexts; SelectParams::
// staged_columns). The select kernel's time is its instructions per score,
// not its reads (ncu, H100, a 512-row chunk at 128K: select.cuh's kernel
// ran 145 M warp instructions in 233 us, half of them binning every score
// and half listing the keys above the threshold bin). So the CTA copies its
// row's scores into shared memory once, every copy in flight, and finds the
// top K without binning the whole row:
//   1. a floor from a sample of the row (one block of 8 per 128 scores, as
//      long_rows.cuh samples: the distance bins of select.cuh over the
//      sample, the bin where its count reaches 2 K x sampled / C), then one
//      pass that lists every key at or above it in index order (warp
//      ballots over each warp's contiguous part of the row into its own
//      share, the shares then moved together). When the list holds K keys
//      or more, the top K are all in it, and the row is finished from the
//      list (~2 K keys): its distance-bin histogram and threshold bin, the
//      exact K-th key among that bin's keys (by counting when they are few,
//      else radix passes), and the stable compaction of the list.
//   2. Otherwise (the floor lay above the K-th key, or a share overflowed)
//      the whole row is binned, and the keys of the threshold bin and above
//      are listed and finished the same way; when a share overflows again
//      (many ties at the threshold) the K-th key is found among the staged
//      row's keys of the threshold bin and each warp writes its part's
//      selected regions in index order: no pass over global memory, no
//      capacity a row can exceed.
// Ties go to the lower index, as in select.cuh.
#pragma once

#include <cstdint>

#include "cuda/attention/ptx.cuh"
#include "cuda/heuristics.h"
#include "cuda/select/long_rows.cuh"
#include "cuda/select/params.h"
#include "cuda/select/row_passes.cuh"
#include "cuda/select/select.cuh"
#include "cuda/select/threshold.cuh"

namespace step5::cuda {

// Starts copying the row's C scores into `staged` (cp.async, one commit
// group): 16-byte copies where the row is 16-byte aligned, else 4-byte
// ones. Every thread calls it.
template <int kThreads>
__device__ __forceinline__ void stage_row(float* staged, const float* scores, int32_t C) {
  const bool vector = reinterpret_cast<uintptr_t>(scores) % 16 == 0;
  const int32_t quad_end = vector ? C / 4 * 4 : 0;
  for (int32_t i = 4 * static_cast<int32_t>(threadIdx.x); i < quad_end; i += 4 * kThreads) {
    attn::cp_async16(attn::smem_addr(staged + i), scores + i, true);
  }
  for (int32_t i = quad_end + static_cast<int32_t>(threadIdx.x); i < C; i += kThreads) {
    attn::cp_async4(attn::smem_addr(staged + i), scores + i, true);
  }
  attn::cp_async_commit();
}

// Bins the staged row's sample (one block of 8 scores per
// select_sample_stride(), at select_sample_first(b), as long_rows.cuh
// samples a row in memory) into sh.hist (zeroed).
template <int kThreads>
__device__ __forceinline__ void bin_staged_sample(SelectShared<kThreads>& sh, const float* staged,
                                                  int32_t C, uint32_t best) {
  for (int32_t b = threadIdx.x; b < C / select_sample_stride(); b += kThreads) {
    const float* block = staged + select_sample_first(b);
#pragma unroll
    for (int k = 0; k < 8; ++k) atomicAdd(&sh.hist[select_bin(score_key(block[k]), best)], 1u);
  }
}

// Bins staged scores [begin, end) (begin a multiple of 4) into sh.hist,
// four a shared load.
template <int kThreads>
__device__ __forceinline__ void bin_staged(SelectShared<kThreads>& sh, const float* staged,
                                           int32_t begin, int32_t end, uint32_t best) {
  constexpr int kUnroll = 2;
  for (int32_t i0 = begin + 4 * static_cast<int32_t>(threadIdx.x); i0 < end;
       i0 += 4 * kThreads * kUnroll) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t i = i0 + 4 * kThreads * u;
      x[u] = i < end ? *reinterpret_cast<const float4*>(staged + i) : float4{};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t i = i0 + 4 * kThreads * u;
      const float v[4] = {x[u].x, x[u].y, x[u].z, x[u].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (i + k < end) atomicAdd(&sh.hist[select_bin(score_key(v[k]), best)], 1u);
      }
    }
  }
}

// Lists the staged keys >= `floor_key` with their index in index order at
// the start of list_key / list_index and returns how many, or -1 when a
// warp's part held more than its share (`share`, a multiple of 32, <=
// select_staged_share_max()). Each warp takes its contiguous part of the
// row 32 keys a ballot, four ballots a step, into its own share; the shares
// are then moved together. Every thread calls it; ends with a barrier.
template <int kThreads>
__device__ int32_t list_staged(SelectShared<kThreads>& sh, const float* staged, int32_t C,
                               uint32_t floor_key, uint32_t* list_key, int32_t* list_index,
                               int32_t share) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kUnroll = 4;
  constexpr int kSpan = 32 * kUnroll;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t part = ((C + kWarps - 1) / kWarps + kSpan - 1) / kSpan * kSpan;
  const int32_t begin = min(C, warp * part), end = min(C, begin + part);
  uint32_t* const keys = list_key + warp * share;
  int32_t* const index = list_index + warp * share;
  const uint32_t below = (1u << lane) - 1u;  // lanes before this one
  uint32_t count = 0;
  bool full = false;
  for (int32_t base = begin; base < end; base += kSpan) {
    uint32_t key[kUnroll], mask[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t j = base + 32 * u + lane;
      key[u] = j < end ? score_key(staged[j]) : 0u;
      mask[u] = __ballot_sync(0xffffffffu, j < end && key[u] >= floor_key);
    }
    uint32_t total = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) total += static_cast<uint32_t>(__popc(mask[u]));
    if (count + total > static_cast<uint32_t>(share)) {
      full = true;
      break;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if ((mask[u] >> lane) & 1u) {
        const uint32_t at = count + static_cast<uint32_t>(__popc(mask[u] & below));
        keys[at] = key[u];
        index[at] = base + 32 * u + lane;
      }
      count += static_cast<uint32_t>(__popc(mask[u]));
    }
  }
  if (lane == 0) sh.warp_end[warp] = full ? select_share_overflow() : count;
  __syncthreads();
  const int32_t entries = join_shares<kThreads>(sh);
  if (entries < 0) return -1;
  // The shares together: each warp's entries go after those of the warps
  // before it (read whole first: a later warp's place may overlap an earlier
  // warp's share).
  constexpr int kPerLane = select_staged_share_max() / 32;
  const uint32_t start = warp == 0 ? 0u : sh.warp_end[warp - 1];
  const int32_t n = static_cast<int32_t>(sh.warp_end[warp] - start);
  uint32_t moved_key[kPerLane];
  int32_t moved_index[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int32_t i = lane + 32 * r;
    moved_key[r] = i < n ? keys[i] : 0u;
    moved_index[r] = i < n ? index[i] : 0;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int32_t i = lane + 32 * r;
    if (i < n) {
      list_key[start + i] = moved_key[r];
      list_index[start + i] = moved_index[r];
    }
  }
  __syncthreads();
  return entries;
}

// Finishes a row from a list in index order of `entries` keys that holds
// every key of the row at or above some floor, at least K of them: the
// distance-bin histogram of the list's keys, its threshold bin, the exact
// K-th key among that bin's keys (counting when few, else radix passes),
// and the stable compaction of the list. Every thread calls it.
template <int kThreads>
__device__ void finish_from_list(SelectShared<kThreads>& sh, const uint32_t* list_key,
                                 const int32_t* list_index, int32_t entries, uint32_t best,
                                 uint32_t K, int32_t* out) {
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  for (int32_t i = threadIdx.x; i < entries; i += kThreads) {
    atomicAdd(&sh.hist[select_bin(list_key[i], best)], 1u);
  }
  __syncthreads();
  ThresholdBin t = threshold_bin<kThreads>(sh, K);
  const uint32_t kth = kth_in_bin<kThreads>(sh, t.in_bin, t.need, [&](auto&& visit) {
    for (int32_t i = threadIdx.x; i < entries; i += kThreads) {
      const uint32_t key = list_key[i];
      if (select_bin(key, best) == t.bin) visit(key);
    }
  });
  StableCompaction<kThreads> compaction{sh, out, kth, t.need};
  for (int32_t base = 0; base < entries; base += kThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    const bool valid = i < entries;
    compaction.emit(valid ? list_key[i] : 0u, valid ? list_index[i] : -1, valid);
  }
}

// Writes the K selected regions of a staged row ascending: keys above
// `kth`, and the first `need` keys equal to it. Each warp owns a contiguous
// part of the row (in whole 32-key steps): one pass counts its keys above
// and equal to kth, a second writes its selected regions at their place in
// index order. Uses sh.hist for the warps' counts. Every thread calls it.
template <int kThreads>
__device__ void write_staged_selection(SelectShared<kThreads>& sh, const float* staged, int32_t C,
                                       uint32_t kth, uint32_t need, int32_t* out) {
  constexpr int kWarps = kThreads / 32;
  static_assert(2 * kWarps <= select_bins(), "the warps' counts fit the histogram");
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t part = ((C + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int32_t begin = min(C, warp * part), end = min(C, begin + part);
  uint32_t gt = 0, eq = 0;
  for (int32_t j = begin + lane; j - lane < end; j += 32) {
    const uint32_t key = j < end ? score_key(staged[j]) : 0u;
    gt += static_cast<uint32_t>(__popc(__ballot_sync(0xffffffffu, j < end && key > kth)));
    eq += static_cast<uint32_t>(__popc(__ballot_sync(0xffffffffu, j < end && key == kth)));
  }
  uint32_t* const warp_gt = sh.hist;
  uint32_t* const warp_eq = sh.hist + kWarps;
  __syncthreads();  // the histogram's last readers are done
  if (lane == 0) {
    warp_gt[warp] = gt;
    warp_eq[warp] = eq;
  }
  __syncthreads();
  uint32_t gt_before = 0, eq_before = 0;
  for (int w = 0; w < warp; ++w) {
    gt_before += warp_gt[w];
    eq_before += warp_eq[w];
  }
  const uint32_t below = (1u << lane) - 1u;  // lanes before this one
  for (int32_t j = begin + lane; j - lane < end; j += 32) {
    const uint32_t key = j < end ? score_key(staged[j]) : 0u;
    const uint32_t greater = __ballot_sync(0xffffffffu, j < end && key > kth);
    const uint32_t equal = __ballot_sync(0xffffffffu, j < end && key == kth);
    const uint32_t g_at = gt_before + static_cast<uint32_t>(__popc(greater & below));
    const uint32_t e_at = eq_before + static_cast<uint32_t>(__popc(equal & below));
    if (((greater >> lane) & 1u) != 0 || (((equal >> lane) & 1u) != 0 && e_at < need)) {
      out[g_at + min(e_at, need)] = j;
    }
    gt_before += static_cast<uint32_t>(__popc(greater));
    eq_before += static_cast<uint32_t>(__popc(equal));
  }
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, select_staged_min_ctas())
    select_staged_kernel(SelectParams p) {
  using Shared = SelectShared<kThreads>;
  __shared__ Shared sh;
  // Dynamic shared memory: the row's scores (p.columns, rounded up to 4),
  // then the list: select_staged_capacity() keys, then as many indices.
  extern __shared__ __align__(16) unsigned char staged_raw[];
  float* const staged = reinterpret_cast<float*>(staged_raw);
  constexpr int32_t kCapacity = select_staged_capacity();
  constexpr int32_t kShare = kCapacity / (kThreads / 32);
  static_assert(kShare % 32 == 0 && kShare <= select_staged_share_max(),
                "list_staged moves a share in registers");
  uint32_t* const list_key = reinterpret_cast<uint32_t*>(staged + (p.columns + 3) / 4 * 4);
  int32_t* const list_index = reinterpret_cast<int32_t*>(list_key + kCapacity);

  const int64_t local_row = blockIdx.x;
  const int g = blockIdx.y;
  SelectRow row;
  if (!select_row_cta<kThreads>(p, local_row, g, row)) return;
  const int32_t closed = row.closed;
  const float* const scores = row_scores(p, local_row, g);
  stage_row<kThreads>(staged, scores, closed);
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
  const uint32_t K = static_cast<uint32_t>(p.topk);

  // The row's best key: from the indexer, or one pass here.
  uint32_t best = p.row_max != nullptr ? p.row_max[local_row * p.num_groups + g] : 0u;
  attn::cp_async_wait<0>();
  __syncthreads();
  if (p.row_max == nullptr) {
    uint32_t m = 0;
    for (int32_t i = threadIdx.x; i < closed; i += kThreads) m = max(m, score_key(staged[i]));
    m = typename Shared::Reduce(sh.cub.reduce).Reduce(m, [](uint32_t a, uint32_t b) {
      return max(a, b);
    });
    if (threadIdx.x == 0) sh.value[2] = m;
    __syncthreads();
    best = sh.value[2];
  } else if (p.clear_row_max != nullptr && threadIdx.x == 0) {
    p.clear_row_max[local_row * p.num_groups + g] = 0;  // every thread read it
  }

  // 1. A floor that about 2 K keys reach, from the sample's histogram, and
  // every key at or above it listed in index order: when they are K or
  // more, the top K are among them.
  bin_staged_sample<kThreads>(sh, staged, closed, best);
  __syncthreads();
  const uint32_t guess = sample_floor<kThreads>(sh, sh.hist, closed, best, K);
  int32_t entries = list_staged<kThreads>(sh, staged, closed, guess, list_key, list_index, kShare);
  if (entries >= p.topk) {
    finish_from_list<kThreads>(sh, list_key, list_index, entries, best, K, row.out);
    return;
  }

  // 2. Otherwise (the floor lay above the K-th key, or a share overflowed):
  // the histogram of every key's distance bin, its threshold bin, and the
  // keys of that bin and above listed and finished the same way.
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  bin_staged<kThreads>(sh, staged, 0, closed, best);
  __syncthreads();
  ThresholdBin t = threshold_bin<kThreads>(sh, K);
  const uint32_t floor_key = select_bin_floor(t.bin, best);
  entries = list_staged<kThreads>(sh, staged, closed, floor_key, list_key, list_index, kShare);
  if (entries >= 0) {
    finish_from_list<kThreads>(sh, list_key, list_index, entries, best, K, row.out);
    return;
  }

  // 3. A share overflowed again (many ties at the threshold): the K-th key
  // among the staged row's keys of the threshold bin, and each warp writes
  // its part's selected regions.
  const uint32_t kth = kth_in_bin<kThreads>(sh, t.in_bin, t.need, [&](auto&& visit) {
    for (int32_t i = threadIdx.x; i < closed; i += kThreads) {
      const uint32_t key = score_key(staged[i]);
      if (select_bin(key, best) == t.bin) visit(key);
    }
  });
  write_staged_selection<kThreads>(sh, staged, closed, kth, t.need, row.out);
}

}  // namespace step5::cuda
