// Selection of steps with few (row, group) selections, each split over a
// thread-block cluster of P CTAs (SelectParams::cluster_parts, sm_90+):
// CTA p reads part p of the row's scores, so the row is streamed by P SMs
// instead of one. The parts agree on one threshold through distributed
// shared memory:
//   1. each part bins its scores (the same distance bins as select.cuh)
//      and lists its keys at or above a floor in the same pass: every key
//      when the part fits its list, else those at or above a floor sampled
//      from all parts' samples (long_rows.cuh);
//   2. every CTA sums the parts' histograms and finds the same threshold
//      bin; the list serves when no warp's share overflowed and the floor
//      lies at or below the bin's (else each part lists its keys of the
//      bin and above in an ordered pass, or, when a part's exceed its list
//      (massive ties), the first CTA selects over the whole row as
//      select.cuh does);
//   3. each part keeps its keys of the threshold bin for the others; every
//      CTA gathers all of them and finds the same exact K-th key;
//   4. each part counts its keys above and equal to it; a part's regions go
//      to the output after those of the parts before it, ties to the lower
//      index as in select.cuh.
// Each decision is taken by every CTA from the same published values after
// a cluster barrier, so all CTAs of a cluster take the same path and meet
// at the same barriers. The first CTA of a cluster also does the row's
// share of the cache work the launch carries (select.cuh); the step's
// summaries are spread over the grid's first CTAs.
#pragma once

#include <cstdint>

#include "cuda/common/cluster.cuh"
#include "cuda/heuristics.h"
#include "cuda/select/long_rows.cuh"
#include "cuda/select/params.h"
#include "cuda/select/row_passes.cuh"
#include "cuda/select/select.cuh"

namespace step5::cuda {

// What a part publishes to the other CTAs of its cluster (in shared memory:
// no initializers).
struct ClusterPart {
  uint32_t best;        // the part's largest key (when the row's is not given)
  uint32_t overflow;    // 1 when a warp's share of the list overflowed
  uint32_t kept;        // keys in the threshold bin and above (after an overflow)
  uint32_t candidates;  // keys in the threshold bin
  uint32_t greater;     // keys above the K-th
  uint32_t equal;       // keys equal to it
};

template <int kThreads>
struct ClusterSelectShared {
  SelectShared<kThreads> sh;      // this part's histogram, cub storage, warps' list counts
  uint32_t total[select_bins()];  // the row's histogram: the parts' summed
  uint32_t own[select_cluster_part_candidates()];  // this part's threshold-bin keys
  uint32_t all[select_cluster_candidates()];       // every part's, gathered
  uint32_t warp_greater[kThreads / 32];
  uint32_t warp_equal[kThreads / 32];
  ClusterPart part;
};

// Sums the parts' histograms `local` (the same array in every CTA of the
// cluster) into `total`. Every thread calls it; the caller synchronizes
// before reading `total`.
template <int kThreads>
__device__ __forceinline__ void sum_part_histograms(uint32_t* local, uint32_t* total, int parts) {
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) {
    uint32_t sum = 0;
    for (int q = 0; q < parts; ++q) sum += cluster_peer(local, q)[b];
    total[b] = sum;
  }
}

// The warp's entries of the part's list: warp w's share starts at w * share
// and holds sh.warp_end[w] entries (raw counts, not prefix sums).
template <class Visit>
__device__ __forceinline__ void visit_warp_entries(const uint32_t* counts, const uint32_t* keys,
                                                   const int32_t* index, int32_t share,
                                                   Visit&& visit) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const auto n = static_cast<int32_t>(counts[warp]);
  for (int32_t i = lane; i < n; i += 32) visit(keys[warp * share + i], index[warp * share + i]);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads, 1) select_cluster_kernel(SelectParams p) {
  constexpr int kWarps = kThreads / 32;
  using Scan = typename SelectShared<kThreads>::Scan;
  using Reduce = typename SelectShared<kThreads>::Reduce;
  __shared__ ClusterSelectShared<kThreads> cs;
  SelectShared<kThreads>& sh = cs.sh;
  // Dynamic shared memory: the part's list, select_cluster_capacity() keys,
  // then as many indices; warp w's share is [w * share, (w + 1) * share).
  extern __shared__ __align__(16) unsigned char list_raw[];
  constexpr int32_t kCapacity = select_cluster_capacity();
  constexpr int32_t kShare = kCapacity / kWarps;
  uint32_t* const list_key = reinterpret_cast<uint32_t*>(list_raw);
  int32_t* const list_index = reinterpret_cast<int32_t*>(list_raw) + kCapacity;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;

  const int parts = p.cluster_parts;
  const int part = cluster_rank();
  const bool first = part == 0;
  const int64_t local_row = blockIdx.x / parts;
  const int g = blockIdx.y;
  // The step's summaries, one warp each, go to the first CTAs of the grid,
  // rows' CTAs included: separate CTAs would come as whole clusters of
  // 1,024-thread CTAs per group, more than the SMs left beside the rows'.
  if (p.summarize) summarize_of_cta(p, int64_t{blockIdx.y} * gridDim.x + blockIdx.x);
  if (local_row >= p.num_rows) return;
  // The early ends are the same for every CTA of the cluster (one row).
  SelectRow row;
  if (!select_row_start<kThreads>(p, local_row, g, first, row)) return;
  const int32_t closed = row.closed;
  int32_t* const out = row.out;
  const float* const scores = row_scores(p, local_row, g);
  const bool vector = reinterpret_cast<uintptr_t>(scores) % 16 == 0;
  // Parts in whole sample strides, so each sampled block lies in one part
  // (and a part's start keeps the row's alignment).
  const int32_t per_part = (closed + parts - 1) / parts;
  const int32_t part_len =
      (per_part + select_sample_stride() - 1) / select_sample_stride() * select_sample_stride();
  const int32_t begin = min(closed, part * part_len);
  const int32_t len = min(closed, begin + part_len) - begin;
  const uint32_t K = static_cast<uint32_t>(p.topk);

  // The row's best key: from the indexer, or the largest of the parts'.
  uint32_t best;
  if (p.row_max != nullptr) {
    best = p.row_max[local_row * p.num_groups + g];
  } else {
    uint32_t m = 0;
    for (int32_t i = threadIdx.x; i < len; i += kThreads) {
      m = max(m, score_key(scores[begin + i]));
    }
    m = Reduce(sh.cub.reduce).Reduce(m, [](uint32_t a, uint32_t b) { return max(a, b); });
    if (threadIdx.x == 0) cs.part.best = m;
    cluster_sync();
    best = 0;
    for (int q = 0; q < parts; ++q) best = max(best, cluster_peer(&cs.part.best, q)[0]);
  }

  // 1. The floor the pass lists from: every key when a whole part's warps'
  // chunks fit their shares (bin_and_list), else sampled over all parts.
  // Decided on part_len, the same in every CTA (the last part may be
  // shorter).
  constexpr int kSpan = 32 * 8;
  const int32_t chunk = ((part_len + kWarps - 1) / kWarps + kSpan - 1) / kSpan * kSpan;
  uint32_t guess = 0;
  if (chunk > kShare) {
    for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    const int32_t blocks = closed / select_sample_stride();
    bin_sample<kThreads>(sh.hist, scores, closed, min(blocks, begin / select_sample_stride()),
                         min(blocks, (begin + part_len) / select_sample_stride()), vector, best);
    cluster_sync();  // every part's sample is binned
    sum_part_histograms<kThreads>(sh.hist, cs.total, parts);
    __syncthreads();
    guess = sample_floor<kThreads>(sh, cs.total, closed, best, K);
    cluster_sync();  // every part has read the others' sample histograms
  }
  for (int b = threadIdx.x; b < select_bins(); b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  bin_and_list<kThreads>(sh, scores + begin, len, vector, best, guess, list_key, list_index,
                         kShare);
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t overflow = 0;
    for (int w = 0; w < kWarps; ++w) overflow |= sh.warp_end[w] == select_share_overflow();
    cs.part.overflow = overflow;
  }
  cluster_sync();  // every part's histogram and list are complete

  // 2. The row's threshold bin, the same in every CTA.
  sum_part_histograms<kThreads>(sh.hist, cs.total, parts);
  bool overflow = false;
  for (int q = 0; q < parts; ++q) overflow = overflow || cluster_peer(&cs.part.overflow, q)[0];
  if (first && p.clear_row_max != nullptr && threadIdx.x == 0) {
    p.clear_row_max[local_row * p.num_groups + g] = 0;  // every part read it
  }
  __syncthreads();
  find_threshold_block<kThreads, select_bins(), Scan>(cs.total, K, sh.cub.scan, &sh.value[0],
                                                      &sh.value[1]);
  __syncthreads();
  const int threshold = static_cast<int>(sh.value[0]);
  const uint32_t above = sh.value[1];
  const uint32_t floor_key = select_bin_floor(threshold, best);
  if (overflow || guess > floor_key) {
    // The list misses keys of the threshold bin or above: each part lists
    // them in an ordered pass when they fit its list.
    uint32_t kept = 0;
    for (int b = threadIdx.x; b < select_bins(); b += kThreads) {
      kept += b >= threshold ? sh.hist[b] : 0u;
    }
    kept = Reduce(sh.cub.reduce).Sum(kept);
    if (threadIdx.x == 0) cs.part.kept = kept;
    cluster_sync();  // every part's count is published, every histogram read
    bool fits = true;
    for (int q = 0; q < parts; ++q) {
      fits = fits && cluster_peer(&cs.part.kept, q)[0] <= static_cast<uint32_t>(kCapacity);
    }
    cluster_arrive();  // read the others' counts: they may exit after the wait
    if (!fits) {
      // Massive ties: the first CTA selects over the whole row.
      if (first) select_over_row<kThreads>(sh, scores, closed, vector, K, out);
      cluster_wait();
      return;
    }
    cluster_wait();
    const int32_t entries = list_at_or_above<kThreads>(sh, scores + begin, len, vector, floor_key,
                                                       list_key, list_index);
    // The contiguous list as warps' shares, in order.
    if (threadIdx.x < kWarps) {
      sh.warp_end[threadIdx.x] = static_cast<uint32_t>(
          min(kShare, max(0, entries - static_cast<int32_t>(threadIdx.x) * kShare)));
    }
    __syncthreads();
  }

  // 3. The part's keys of the threshold bin, kept for the other CTAs.
  if (threadIdx.x == 0) cs.part.candidates = 0;
  __syncthreads();
  visit_warp_entries(sh.warp_end, list_key, list_index, kShare, [&](uint32_t key, int32_t) {
    if (select_bin(key, best) != threshold) return;
    const uint32_t at = atomicAdd(&cs.part.candidates, 1u);
    if (at < static_cast<uint32_t>(select_cluster_part_candidates())) {
      cs.own[at] = key;
    }
  });
  cluster_sync();  // every part's candidates are published
  uint32_t gathered = 0;
  bool each_fits = true;
  for (int q = 0; q < parts; ++q) {
    const uint32_t n = cluster_peer(&cs.part.candidates, q)[0];
    each_fits = each_fits && n <= static_cast<uint32_t>(select_cluster_part_candidates());
    gathered += n;
  }
  uint32_t need = K - above;
  uint32_t kth;
  if (each_fits && gathered <= static_cast<uint32_t>(select_cluster_candidates())) {
    uint32_t at = 0;
    for (int q = 0; q < parts; ++q) {
      const uint32_t* peer_own = cluster_peer(cs.own, q);
      const uint32_t n = cluster_peer(&cs.part.candidates, q)[0];
      for (uint32_t i = threadIdx.x; i < n; i += kThreads) cs.all[at + i] = peer_own[i];
      at += n;
    }
    __syncthreads();
    auto candidates = [&](auto&& visit) {
      for (uint32_t i = threadIdx.x; i < gathered; i += kThreads) visit(cs.all[i]);
    };
    kth = kth_in_bin<kThreads>(sh, gathered, need, candidates);
  } else {
    // More candidates than the gathered array holds: radix passes over
    // every part's list, read in place.
    kth = radix_select<kThreads>(sh, need, [&](auto&& visit) {
      for (int q = 0; q < parts; ++q) {
        visit_warp_entries(cluster_peer(sh.warp_end, q), cluster_peer(list_key, q),
                           cluster_peer(list_index, q), kShare, [&](uint32_t key, int32_t) {
                             if (select_bin(key, best) == threshold) visit(key);
                           });
      }
    });
  }

  // 4. The part's keys above and equal to the K-th, per warp, then the
  // part's regions after those of the parts before it.
  {
    uint32_t greater = 0, equal = 0;
    visit_warp_entries(sh.warp_end, list_key, list_index, kShare, [&](uint32_t key, int32_t) {
      greater += key > kth ? 1u : 0u;
      equal += key == kth ? 1u : 0u;
    });
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      greater += __shfl_xor_sync(0xffffffffu, greater, offset);
      equal += __shfl_xor_sync(0xffffffffu, equal, offset);
    }
    if (lane == 0) {
      cs.warp_greater[warp] = greater;
      cs.warp_equal[warp] = equal;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t greater = 0, equal = 0;
    for (int w = 0; w < kWarps; ++w) {
      greater += cs.warp_greater[w];
      equal += cs.warp_equal[w];
    }
    cs.part.greater = greater;
    cs.part.equal = equal;
  }
  cluster_sync();  // every part's counts are published
  uint32_t greater_before = 0, equal_before = 0;
  for (int q = 0; q < part; ++q) {
    greater_before += cluster_peer(&cs.part.greater, q)[0];
    equal_before += cluster_peer(&cs.part.equal, q)[0];
  }
  // Done with the other CTAs' shared memory: none may exit before every
  // CTA has arrived here.
  cluster_arrive();
  for (int w = 0; w < warp; ++w) {
    greater_before += cs.warp_greater[w];
    equal_before += cs.warp_equal[w];
  }
  const auto n = static_cast<int32_t>(sh.warp_end[warp]);
  const uint32_t lower = (1u << lane) - 1u;
  for (int32_t i0 = 0; i0 < n; i0 += 32) {
    const int32_t i = i0 + lane;
    const bool valid = i < n;
    const uint32_t key = valid ? list_key[warp * kShare + i] : 0u;
    const bool is_greater = valid && key > kth, is_equal = valid && key == kth;
    const uint32_t greater_mask = __ballot_sync(0xffffffffu, is_greater);
    const uint32_t equal_mask = __ballot_sync(0xffffffffu, is_equal);
    const uint32_t g_before = greater_before + __popc(greater_mask & lower);
    const uint32_t e_before = equal_before + __popc(equal_mask & lower);
    if (is_greater || (is_equal && e_before < need)) {
      out[g_before + min(e_before, need)] = begin + list_index[warp * kShare + i];
    }
    greater_before += __popc(greater_mask);
    equal_before += __popc(equal_mask);
  }
  cluster_wait();
}

}  // namespace step5::cuda
