// One CTA per (row, group). With C <= K closed regions the row takes all of
// them; otherwise the K best of its scores (top_k.cuh).
//
// The launch also carries parts of the forward's cache update (params.h):
// the ring write always, and on decode steps the K/V write (by the row
// CTAs) and the summaries (by extra CTAs past the rows).
#pragma once

#include "cuda/common/dispatch.h"
#include "cuda/common/programmatic.cuh"
#include "cuda/heuristics.h"
#include "cuda/select/params.h"
#include "cuda/select/top_k.cuh"
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

template <int kThreads>
__global__ void __launch_bounds__(kThreads, select_min_ctas(kThreads))
    select_kernel(SelectParams p) {
  using Shared = SelectShared<kThreads>;
  __shared__ Shared sh;
  // Dynamic shared memory: the kept list, select_list_capacity(p.columns)
  // keys, then as many indices.
  extern __shared__ __align__(16) unsigned char list_raw[];
  uint32_t* const list_key = reinterpret_cast<uint32_t*>(list_raw);
  const int32_t capacity = select_list_capacity(p.columns);
  int32_t* const list_index = reinterpret_cast<int32_t*>(list_raw) + capacity;

  // Launched programmatically, the CTA may run next to the indexer's last
  // CTAs: nothing is read or written before that grid has ended. The
  // attention launch after this one may then place its CTAs as these end.
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t local_row = blockIdx.x;
  const int g = blockIdx.y;
  if (local_row >= p.num_rows) {
    summarize_of_cta(p, (local_row - p.num_rows) * p.num_groups + g);
    return;
  }
  if (p.write_kv) write_kv_of_row(p, p.row_begin + local_row, g);
  int32_t request = 0, position = 0;
  const bool live = row_of(p.rows, p.row_begin + local_row, request, position);
  const int32_t closed = position / 8;  // 0 for a padding row: all -1 below
  if (p.write_ring && g == 0 && live) {
    int32_t ring_position = 0;
    if (ring_keeps(p.ring, request, p.row_begin + local_row, ring_position)) {
      write_ring_row(p.ring, request, p.row_begin + local_row, ring_position,
                     static_cast<int>(threadIdx.x), kThreads);
    }
  }
  int32_t* out = p.selected + local_row * p.selected_stride_t + g * p.selected_stride_g;
  if (closed <= p.topk) {
    for (int32_t i = threadIdx.x; i < p.topk; i += kThreads) out[i] = i < closed ? i : -1;
    return;
  }
  if (closed > p.columns) {
    // More closed regions than were scored: a context past the plan's
    // (device seq_lens grown in a graph replay). Nothing is selected and
    // no score past the row's columns is read.
    if (threadIdx.x == 0 && g == 0) {
      report_fault(p.guard, DeviceFault::beyond_plan, p.row_begin + local_row, position);
    }
    if (p.clear_row_max != nullptr && threadIdx.x == 0) {
      p.clear_row_max[local_row * p.num_groups + g] = 0;
    }
    for (int32_t i = threadIdx.x; i < p.topk; i += kThreads) out[i] = -1;
    return;
  }
  RowTopK r;
  r.scores = p.scores + local_row * p.scores_stride_t + g * p.scores_stride_g;
  r.closed = closed;
  r.topk = p.topk;
  r.vector = reinterpret_cast<uintptr_t>(r.scores) % 16 == 0;
  r.list_key = list_key;
  r.list_index = list_index;
  r.capacity = capacity - 1;  // the last entry is the sink (top_k.cuh)
  r.out = out;

  // The row's best key: from the indexer, or one pass here.
  if (p.row_max != nullptr) {
    r.best = p.row_max[local_row * p.num_groups + g];
    __syncthreads();  // every thread read it before it is cleared
    if (p.clear_row_max != nullptr && threadIdx.x == 0) {
      p.clear_row_max[local_row * p.num_groups + g] = 0;
    }
  } else {
    constexpr int kItems = select_items();
    constexpr int kStep = kThreads * kItems;
    const int32_t mine = static_cast<int32_t>(threadIdx.x) * kItems;
    uint32_t m = 0;
    for (int32_t base = 0; base < closed; base += kStep) {
      uint32_t key[kItems];
      load_keys<kItems>(r.scores, closed, base + mine, r.vector, key);
#pragma unroll
      for (int k = 0; k < kItems; ++k) m = max(m, key[k]);
    }
    m = typename Shared::Reduce(sh.cub.reduce).Reduce(m, [](uint32_t a, uint32_t b) {
      return max(a, b);
    });
    if (threadIdx.x == 0) sh.value[2] = m;
    __syncthreads();
    r.best = sh.value[2];
  }
  select_top_k<kThreads>(sh, r);
}

}  // namespace step5::cuda
