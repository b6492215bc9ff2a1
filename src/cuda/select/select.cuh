// One CTA per (row, group). With C <= K closed regions the row takes all of
// them. Otherwise, on order keys of the scores (larger score, larger key):
//   1. bins by distance below the row's best key (fine near the top), a
//      histogram in shared memory, and the threshold bin that holds the
//      K-th key;
//   2. one ordered pass keeps every region in a bin above the threshold
//      bin and every candidate inside it, in index order, in shared memory
//      (in the long-row instance, rows longer than the list skip it when
//      the histogram pass already listed every key at or above a floor
//      sampled below the threshold: long_rows.cuh);
//   3. the exact K-th key among the candidates (by counting when they are
//      few, else radix passes) and how many regions equal to it are taken
//      (the lowest-indexed ones);
//   4. one ordered pass over the kept list writes the K regions ascending.
// Bins are a monotone function of the key, so every region of a higher bin
// beats every region of a lower one; the exact order inside the threshold
// bin decides the rest, ties to the lower index, as the reference's stable
// sort. When the threshold bin holds more candidates than shared memory
// (massive ties), four radix passes and one compaction over global memory
// decide instead.
//
// The launch also carries parts of the forward's cache update (params.h):
// the ring write always, and on decode steps the K/V write (by the row
// CTAs) and the summaries (by extra CTAs past the rows).
#pragma once

#include <type_traits>

#include "cuda/common/dispatch.h"
#include "cuda/common/programmatic.cuh"
#include "cuda/common/score_key.cuh"
#include "cuda/heuristics.h"
#include "cuda/select/long_rows.cuh"
#include "cuda/select/params.h"
#include "cuda/select/row_passes.cuh"
#include "cuda/select/threshold.cuh"
#include "cuda/summaries/cache_update.cuh"

namespace step5::cuda {

// The K/V write of step row t, head g (SelectParams::write_kv), by the CTA
// of (t, g), first thing: one vector per thread (padding rows are skipped
// inside). Issued after the row's first score loads instead, the launch
// took as long (23.5-23.9 us).
__device__ __forceinline__ void write_kv_of_row(const SelectParams& p, int64_t t, int g) {
  const int64_t live = kv_live_rows(p.kv);
  for (int v = threadIdx.x; v < 2 * p.kv.head_size / 8; v += blockDim.x) {
    if (p.kv_fp8) {
      write_kv_vector<Fp8Tag>(p.kv, t, g, v, live);
    } else {
      write_kv_vector<Bf16Tag>(p.kv, t, g, v, live);
    }
  }
}

// The summaries (SelectParams::summarize) by the CTAs past the launch's
// rows, one warp per (request, closing region), so they do not hold up a
// row's selection (ncu, 128K b32 decode: 24.7-25.2 us with them in the row
// CTAs, 23.4-24.0 us in CTAs of their own; the separate cache update and
// select launches took 7.6-7.9 + 20.1 us).
__device__ __forceinline__ void summarize_of_cta(const SelectParams& p, int64_t cta) {
  const int warps = static_cast<int>(blockDim.x / 32);
  const int64_t item = cta * warps + threadIdx.x / 32;
  if (item >= int64_t{p.ring.num_requests} * p.ring.max_closing) return;
  const int r = static_cast<int>(item / p.ring.max_closing);
  const auto k = static_cast<int32_t>(item % p.ring.max_closing);
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (p.summary_fp8) {
    summarize_closing<Fp8Tag>(p.ring, r, k, lane);
  } else {
    summarize_closing<Bf16Tag>(p.ring, r, k, lane);
  }
}

// The row a select CTA works on, once select_row_start let it through.
struct SelectRow {
  int32_t closed;  // its closed regions, > K and <= the launch's columns
  int32_t* out;    // its K output entries
};

// The start every select kernel shares for row `local_row`, group g: the
// cache work the launch carries for the row (write_kv, the ring row), the
// rows that need no selection (at most K closed regions: all of them;
// more than the launch scored: none, a context past the plan's, as a
// fault) and the programmatic wait before any score is read. `writer`: this
// CTA does the row's cache work and writes its output (a cluster's first
// CTA; every CTA of the one-CTA-per-row kernels, through select_row_cta).
// Returns false when the row is done.
template <int kThreads>
__device__ __forceinline__ bool select_row_start(const SelectParams& p, int64_t local_row, int g,
                                                 bool writer, SelectRow& row) {
  // Launched programmatically, the CTA may run next to the indexer's last
  // CTAs. Until the wait below it touches nothing the indexer reads or
  // writes: the cache update this launch may carry (write_kv, summarize:
  // one query row per request, so no row scores a region the step closes)
  // and the ring write read the step's inputs and the ring as the last step
  // left it; rows of at most K closed regions need no scores. The scores
  // and row maxima are read only after the indexer's grid has ended. The
  // attention launch after this one may then place its CTAs as these end.
  if (p.write_kv && writer) write_kv_of_row(p, p.row_begin + local_row, g);
  int32_t request = 0, position = 0;
  const bool live = row_of(p.rows, p.row_begin + local_row, request, position);
  const int32_t closed = position / 8;  // 0 for a padding row: all -1 below
  if (p.write_ring && g == 0 && writer && live) {
    int32_t ring_position = 0;
    if (ring_keeps(p.ring, request, p.row_begin + local_row, ring_position)) {
      write_ring_row(p.ring, request, p.row_begin + local_row, ring_position,
                     static_cast<int>(threadIdx.x), kThreads);
    }
  }
  int32_t* out = p.selected + local_row * p.selected_stride_t + g * p.selected_stride_g;
  if (closed <= p.topk) {
    if (writer) {
      for (int32_t i = threadIdx.x; i < p.topk; i += kThreads) out[i] = i < closed ? i : -1;
    }
    return false;
  }
  wait_for_previous_grid();
  allow_next_grid();
  if (closed > p.columns) {
    // More closed regions than were scored: a context past the plan's
    // (device seq_lens grown in a graph replay). Nothing is selected and
    // no score past the row's columns is read.
    if (writer && threadIdx.x == 0 && g == 0) {
      report_fault(p.guard, DeviceFault::beyond_plan, p.row_begin + local_row, position);
    }
    if (writer && p.clear_row_max != nullptr && threadIdx.x == 0) {
      p.clear_row_max[local_row * p.num_groups + g] = 0;
    }
    if (writer) {
      for (int32_t i = threadIdx.x; i < p.topk; i += kThreads) out[i] = -1;
    }
    return false;
  }
  row.closed = closed;
  row.out = out;
  return true;
}

// The start of the kernels with one CTA per (row, group), blockIdx (x, y)
// = (local_row, g): the CTAs past the rows summarize the step's closing
// regions, the others start their row. Returns false when the CTA is done.
template <int kThreads>
__device__ __forceinline__ bool select_row_cta(const SelectParams& p, int64_t local_row, int g,
                                               SelectRow& row) {
  if (local_row >= p.num_rows) {
    summarize_of_cta(p, (local_row - p.num_rows) * p.num_groups + g);
    return false;
  }
  return select_row_start<kThreads>(p, local_row, g, true, row);
}

// Row `local_row`'s scores for group g. Recomputed where needed rather than
// kept in SelectRow: the cluster kernel is at its 64-register bound.
__device__ __forceinline__ const float* row_scores(const SelectParams& p, int64_t local_row,
                                                   int g) {
  return p.scores + local_row * p.scores_stride_t + g * p.scores_stride_g;
}

// kLongRows: the instance for launches of long rows (select_long_columns),
// whose rows longer than the list take one pass (long_rows.cuh).
template <int kThreads, bool kLongRows>
__global__ void __launch_bounds__(kThreads, select_min_ctas(kThreads))
    select_kernel(SelectParams p) {
  constexpr int kItems = select_items();
  constexpr int kBins = select_bins();
  using Shared = SelectShared<kThreads>;
  using Scan = typename Shared::Scan;
  __shared__ Shared sh;
  // Dynamic shared memory: the kept list, select_list_capacity(p.columns,
  // p.short_columns, kLongRows) keys, then as many indices.
  extern __shared__ __align__(16) unsigned char list_raw[];
  uint32_t* const list_key = reinterpret_cast<uint32_t*>(list_raw);
  const int32_t capacity = select_list_capacity(p.columns, p.short_columns, kLongRows);
  int32_t* const list_index = reinterpret_cast<int32_t*>(list_raw) + capacity;

  const int64_t local_row = blockIdx.x;
  const int g = blockIdx.y;
  SelectRow row;
  if (!select_row_cta<kThreads>(p, local_row, g, row)) return;
  const int32_t closed = row.closed;
  int32_t* const out = row.out;
  const float* const scores = row_scores(p, local_row, g);
  const bool vector = reinterpret_cast<uintptr_t>(scores) % 16 == 0;
  constexpr int kStep = kThreads * kItems;
  const int32_t mine = static_cast<int32_t>(threadIdx.x) * kItems;

  // The row's best key: from the indexer, or one pass here.
  uint32_t best;
  if (p.row_max != nullptr) {
    best = p.row_max[local_row * p.num_groups + g];
    __syncthreads();  // every thread read it before it is cleared
    if (p.clear_row_max != nullptr && threadIdx.x == 0) {
      p.clear_row_max[local_row * p.num_groups + g] = 0;
    }
  } else {
    uint32_t m = 0;
    for (int32_t base = 0; base < closed; base += kStep) {
      uint32_t key[kItems];
      load_keys<kItems>(scores, closed, base + mine, vector, key);
#pragma unroll
      for (int k = 0; k < kItems; ++k) m = max(m, key[k]);
    }
    m = typename Shared::Reduce(sh.cub.reduce).Reduce(m, [](uint32_t a, uint32_t b) {
      return max(a, b);
    });
    if (threadIdx.x == 0) sh.value[2] = m;
    __syncthreads();
    best = sh.value[2];
  }

  // 1. Histogram of distance bins, one shared atomic per score (equal bins
  // within a warp serialize: rows of tied scores bin slower, not wrongly;
  // their time was not measured). The next step's scores are loaded before
  // this step's are binned. Rows longer than the list in the long-row
  // instance list the keys at or above a sampled floor in the same pass.
  const bool one_pass = kLongRows && closed > capacity;
  const int32_t share = capacity / (kThreads / 32);
  uint32_t guess = 0;
  if (one_pass) {
    guess =
        sampled_floor<kThreads>(sh, scores, closed, vector, best, static_cast<uint32_t>(p.topk));
  }
  for (int b = threadIdx.x; b < kBins; b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  if (one_pass) {
    bin_and_list<kThreads>(sh, scores, closed, vector, best, guess, list_key, list_index, share);
  } else {
    uint32_t key[kItems];
    load_keys<kItems>(scores, closed, mine, vector, key);
    for (int32_t base = 0; base < closed; base += kStep) {
      uint32_t next[kItems] = {};  // defined after the last step too (copied, not read)
      if (base + kStep < closed)
        load_keys<kItems>(scores, closed, base + kStep + mine, vector, next);
      // Whole steps (all but the last) bin without bounds checks.
      auto bin_step = [&](auto whole) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
          if (decltype(whole)::value || base + mine + k < closed) {
            atomicAdd(&sh.hist[select_bin(key[k], best)], 1u);
          }
        }
      };
      if (base + kStep <= closed) {
        bin_step(std::true_type{});
      } else {
        bin_step(std::false_type{});
      }
#pragma unroll
      for (int k = 0; k < kItems; ++k) key[k] = next[k];
    }
  }
  __syncthreads();
  find_threshold_block<kThreads, kBins, Scan>(sh.hist, static_cast<uint32_t>(p.topk), sh.cub.scan,
                                              &sh.value[0], &sh.value[1]);
  __syncthreads();
  const int threshold = static_cast<int>(sh.value[0]);
  const uint32_t above = sh.value[1];
  const uint32_t kept = above + sh.hist[threshold];
  uint32_t need = static_cast<uint32_t>(p.topk) - above;

  int32_t entries = 0;
  const uint32_t floor_key = select_bin_floor(threshold, best);
  // One pass: the list serves when it holds every key of the threshold bin
  // and above (the sampled floor at or below the bin's, no share full).
  bool listed = false, shares = false;
  if (one_pass) {
    entries = join_shares<kThreads>(sh);
    listed = shares = entries >= 0 && guess <= floor_key;
  }
  if (!listed && kept <= static_cast<uint32_t>(capacity)) {
    // 2. Ordered pass: every region in a bin >= the threshold bin, i.e.
    // with a key >= the bin's floor.
    listed = true;
    entries =
        list_at_or_above<kThreads>(sh, scores, closed, vector, floor_key, list_key, list_index);
  }
  if (!listed) {
    // Massive ties: exact radix select over all of the row's keys in global
    // memory (need counts from the top of the whole row).
    select_over_row<kThreads>(sh, scores, closed, vector, static_cast<uint32_t>(p.topk), out);
    return;
  }
  // Where entry i (index order) of the list lies.
  auto slot = [&](int32_t i) { return shares ? share_slot<kThreads>(sh, share, i) : i; };
  __syncthreads();
  // 3. The K-th key among the candidates of the threshold bin.
  auto candidates = [&](auto&& visit) {
    for (int32_t i = threadIdx.x; i < entries; i += kThreads) {
      const uint32_t key = list_key[slot(i)];
      if (select_bin(key, best) == threshold) visit(key);
    }
  };
  const uint32_t kth = kth_in_bin<kThreads>(sh, kept - above, need, candidates);

  // 4. Stable compaction of the list.
  StableCompaction<kThreads> compaction{sh, out, kth, need};
  for (int32_t base = 0; base < entries; base += kThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    const bool valid = i < entries;
    const int32_t at = valid ? slot(i) : 0;
    compaction.emit(valid ? list_key[at] : 0u, valid ? list_index[at] : -1, valid);
  }
}

}  // namespace step5::cuda
