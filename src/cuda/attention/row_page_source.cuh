// Page source of the row kernel (paged_kernel.cuh): which (row, KV group,
// split) a CTA computes and the row's setup before the kernel waits for
// the previous grid (fault check, an SWA row's own K/V, Q), then the row's
// page list (a CSA selection compacted into shared memory, an SWA window
// implicit), the split's share of it with its cache blocks looked up once,
// and the cp.async copies of a warp's 16-key steps out of the paged cache
// into its stage buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention/fragments.cuh"
#include "cuda/attention/heuristics.h"
#include "cuda/attention/launch.h"
#include "cuda/attention/ptx.cuh"
#include "cuda/attention/row_fragments.cuh"
#include "cuda/common/block_position.cuh"
#include "cuda/common/dispatch.h"
#include "cuda/common/guard.h"
#include "cuda/common/rows.h"
#include "cuda/kv_write/kv_write.cuh"

namespace step5::cuda::attn {

// Ordered compaction of a CSA row's selection into shared memory: entries
// outside [0, c) (the -1 padding) are dropped and the current region c is
// appended. Order is kept so results do not depend on scheduling.
template <int kThreads>
__device__ int32_t compact_pages(const int32_t* sel, int32_t topk, int32_t cur, int32_t* pages,
                                 int* warp_count) {
  constexpr int kWarps = kThreads / 32;
  // Entries loaded per thread before the first is used: a K = 512 list is
  // one round trip to memory, not four.
  constexpr int kBatch = 4;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  int32_t base = 0;
  for (int32_t i0 = 0; i0 < topk; i0 += kBatch * kThreads) {
    int32_t v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int32_t i = i0 + b * kThreads + static_cast<int32_t>(threadIdx.x);
      v[b] = i < topk ? __ldg(sel + i) : -1;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const bool keep = v[b] >= 0 && v[b] < cur;
      const unsigned bits = __ballot_sync(0xffffffffu, keep);
      if (lane == 0) warp_count[warp] = __popc(bits);
      __syncthreads();
      int32_t offset = base;
      int32_t total = 0;
      for (int w = 0; w < kWarps; ++w) {
        if (w < warp) offset += warp_count[w];
        total += warp_count[w];
      }
      if (keep) pages[offset + __popc(bits & ((1u << lane) - 1u))] = v[b];
      base += total;
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) pages[base] = cur;
  __syncthreads();
  return base + 1;
}

// Zeros for the hpg heads of group g in output row t, 16 bytes per thread
// (the output is 16-byte aligned with strides multiple of 8: check_params).
template <int D>
__device__ __forceinline__ void zero_group_rows(const PagedAttentionParams& p, int64_t t, int g,
                                                int hpg) {
  const int vectors = hpg * (D / 8);
  for (int i = static_cast<int>(threadIdx.x); i < vectors; i += static_cast<int>(blockDim.x)) {
    const int64_t head = int64_t{g} * hpg + i / (D / 8);
    const int d = (i % (D / 8)) * 8;
    *reinterpret_cast<uint4*>(p.output + t * p.output_row_stride + head * p.output_head_stride +
                              d) = make_uint4(0, 0, 0, 0);
  }
}

// What one CTA computes: launch row `local` (step row t) of KV group g,
// entries [begin, end) of the row's page list (its split). No bool members
// (whether the row is bad, whether its blocks are translated: the
// kernel's locals): ptxas kept bool members as 16-bit values and allocated
// the kernel's registers differently.
struct RowWork {
  int64_t local = 0;                // launch row
  int64_t t = 0;                    // step row
  int g = 0;                        // KV group
  int split = 0;                    // split of the row's page list
  int32_t request = 0;              // the row's request
  int32_t pos = 0;                  // the row's position
  int32_t cur = 0;                  // region of the row's position (its last page)
  int32_t lo = 0;                   // lowest attended key position (SWA; 0 for CSA)
  int32_t first = 0;                // SWA: region of page-list entry 0
  int32_t begin = 0;                // the split's entries of the page list
  int32_t end = 0;                  //
  const int32_t* pages = nullptr;   // CSA page list (shared memory); unused for SWA
  const int32_t* blocks = nullptr;  // block of entry begin + i at i (shared memory)
  const int32_t* bt = nullptr;      // the request's block-table row
};

// Block-table column of a position and its token inside the block.
__device__ __forceinline__ int32_t block_column(const PagedAttentionParams& p, int32_t kpos) {
  return block_of(kpos, p.block_shift, p.block_size);
}
__device__ __forceinline__ int32_t block_token(const PagedAttentionParams& p, int32_t kpos) {
  return token_in_block(kpos, p.block_shift, p.block_size);
}

// The CTA's (row, group, split) and the row's request and position; false
// for a padding row (no request), which the caller zeros or leaves, and for
// a -1 entry of the row list (a row the tile kernel computes: w.t < 0).
// Splits vary fastest, then rows, then groups: the CTAs resident at one
// time read one group's pages, so rows of one request that share pages
// (prefill chunks, verify) find them in L2 instead of every group's pages
// competing for it.
__device__ __forceinline__ bool locate_row(const PagedAttentionParams& p, int num_splits,
                                           RowWork& w) {
  int64_t cta = blockIdx.x;
  w.split = static_cast<int>(cta % num_splits);
  cta /= num_splits;
  w.g = static_cast<int>(cta / p.num_rows);
  w.local = cta % p.num_rows;
  w.t = p.row_list != nullptr ? int64_t{__ldg(p.row_list + w.local)} : p.row_begin + w.local;
  return w.t >= 0 && row_of(p.rows, w.t, w.request, w.pos);
}

// Step row t's K and V of group g into the cache (PagedAttentionParams::
// write_kv), one 16-byte input vector per thread; the caller's next barrier
// orders them before the CTA's copies.
template <class T>
__device__ __forceinline__ void write_row_kv(const KvWriteParams& p, int64_t t, int g) {
  using Storage = std::conditional_t<T::kIsFp8, Fp8Tag, Bf16Tag>;
  static_assert(2 * T::kDim / 8 <= attention_threads(), "one vector per thread");
  const int v = static_cast<int>(threadIdx.x);
  if (v < 2 * T::kDim / 8) write_kv_vector<Storage>(p, t, g, v, kv_live_rows(p));
}

// The row's setup, all of it before the kernel's wait_for_previous_grid():
// the row metadata and Q need nothing of the forward's earlier grids
// (written before its first launch, or not read by them), so their loads
// overlap the wait; the selection and the cache pages are read after it
// (load_row_pages, issue_step). An SWA row's own K/V (write_kv) is written
// here as well: only CSA launches are programmatic (LayerSchedule::
// programmatic_launch), so for SWA the wait is a no-op.
// Returns 1 when the row is bad, else 0: a position the block table cannot
// hold (negative lengths, seq_lens past the table in a graph replay) reads
// no key and comes out NaN; reported once per row. Also clears `row_fault`
// and loads Q of the group's heads as m16n8k16 B fragments into `qb`
// (heads >= hpg zero). An int, not a bool: a bool passed between these
// inlined functions stayed a 16-bit value in the PTX instead of a
// predicate, and the bf16 CSA D = 192 kernel then spilled (ptxas -v).
template <class T, int kNT>
__device__ __forceinline__ int begin_row(const PagedAttentionParams& p, int num_splits, int hpg,
                                         int lane, int& row_fault, RowWork& w,
                                         uint32_t (&qb)[T::kDim / 16][kNT][2]) {
  w.cur = w.pos / page_tokens();
  const bool bad_row = w.pos < 0 || !column_ok(p.guard, block_column(p, w.pos));
  if (bad_row && threadIdx.x == 0 && w.g == 0 && w.split == 0) {
    report_fault(p.guard, w.pos < 0 ? DeviceFault::bad_position : DeviceFault::past_block_table,
                 w.t, w.pos);
  }
  if constexpr (!T::kIsCsa) {
    // The row's own K/V (PagedAttentionParams::write_kv, SWA) by the split
    // that reads its last page, pages floor(lo / 8)..cur (a faulted row:
    // the first split); the caller's barrier after the wait puts it before
    // every copy.
    if (p.write_kv) {
      const int32_t pages = bad_row ? 0 : w.cur - swa_first_page(w.pos, p.window) + 1;
      if (w.split == last_page_split(pages, num_splits)) write_row_kv<T>(p.kv_write, w.t, w.g);
    }
  }
  if (threadIdx.x == 0) row_fault = 0;
  load_q_cols<T, kNT>(p.query + w.t * p.query_row_stride + int64_t{w.g} * hpg * p.query_head_stride,
                      p.query_head_stride, hpg, lane, qb);
  return bad_row ? 1 : 0;
}

// After the wait and a barrier: the row's page list and the split's share
// of it, [w.begin, w.end). A CSA list is compacted from the selection into
// `smem_pages` (max_pages entries); a bad row (begin_row) gets no pages.
template <class T>
__device__ __forceinline__ void load_row_pages(const PagedAttentionParams& p, int num_splits,
                                               int bad_row, int32_t* smem_pages, int* warp_count,
                                               RowWork& w) {
  int32_t num_pages = 0;
  if (bad_row != 0) {
    num_pages = 0;
  } else if constexpr (T::kIsCsa) {
    const int32_t* sel =
        p.selected + (w.t - p.row_begin) * p.selected_row_stride + w.g * p.selected_group_stride;
    num_pages = compact_pages<attention_threads()>(sel, p.topk, w.cur, smem_pages, warp_count);
  } else {
    w.lo = max(0, w.pos - p.window + 1);
    w.first = swa_first_page(w.pos, p.window);
    num_pages = w.cur - w.first + 1;
  }
  const SplitPages range = split_pages(num_pages, num_splits, w.split);
  w.begin = range.begin;
  w.end = range.end;
  w.pages = smem_pages;
}

// The split's pages translated to cache blocks up front when `translated`
// (the split fits the table), all threads at once, into `smem_blocks`: the
// copy loop then reads block ids from shared memory instead of waiting on a
// dependent block-table load every step (that load's latency bounded the
// step rate, so fp8 ran no faster than bf16). A split longer than the
// table (very wide windows) looks blocks up as it goes. A block id
// outside the cache is reported and zeroes the warp's `my_steps` here (the
// split then reads nothing and comes out NaN), not returned as a second
// bool, which ptxas kept as a 16-bit value (RowWork's note).
template <class T>
__device__ __forceinline__ bool translate_blocks(const PagedAttentionParams& p, int32_t table_pages,
                                                 int32_t* smem_blocks, int& row_fault, RowWork& w,
                                                 int32_t& my_steps) {
  w.blocks = smem_blocks;
  w.bt = p.block_table + int64_t{w.request} * p.block_table_stride;
  const bool translated = w.end - w.begin <= table_pages;
  if (translated) {
    // kBatch lookups in flight per thread before the first is stored (a
    // CSA split of 513 pages: one round trip to memory, not five).
    constexpr int kBatch = 8;
    constexpr int kThreads = attention_threads();
    for (int32_t e0 = w.begin; e0 < w.end; e0 += kBatch * kThreads) {
      int32_t block[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int32_t e = e0 + b * kThreads + static_cast<int32_t>(threadIdx.x);
        const int32_t region = e < w.end ? (T::kIsCsa ? w.pages[e] : w.first + e) : 0;
        block[b] = e < w.end ? __ldg(w.bt + block_column(p, region * page_tokens())) : 0;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int32_t e = e0 + b * kThreads + static_cast<int32_t>(threadIdx.x);
        if (e >= w.end) continue;
        if (!block_ok(p.guard, block[b])) {
          report_fault(p.guard, DeviceFault::kv_block, w.t, block[b]);
          row_fault = 1;
        }
        smem_blocks[e - w.begin] = block[b];
      }
    }
    __syncthreads();
    if (row_fault != 0) my_steps = 0;
  }
  return translated;
}

// Issues the cp.async copies of a warp's 16-key step `step` (of the
// split's steps) into stage `stage` of its buffers `wbuf`; returns the
// 16-bit mask of keys in the row's key set (the others are zero-filled).
// `kv_group`: the cache's base for the row's KV group; `translated`: as
// for translate_blocks.
template <class T>
__device__ __forceinline__ uint32_t issue_step(const PagedAttentionParams& p, const RowWork& w,
                                               bool translated, const char* kv_group, int lane,
                                               unsigned char* wbuf, int& row_fault, int32_t step,
                                               int stage) {
  bool valid = false;
  const char* src = static_cast<const char*>(p.kv);
  if (lane < keys_per_step()) {
    const int32_t e = w.begin + step * pages_per_step() + lane / page_tokens();
    if (e < w.end) {
      const int32_t region = T::kIsCsa ? w.pages[e] : w.first + e;
      const int32_t kpos = region * page_tokens() + lane % page_tokens();
      valid = kpos >= w.lo && kpos <= w.pos;
      const int64_t block = !valid       ? 0
                            : translated ? w.blocks[e - w.begin]
                                         : __ldg(w.bt + block_column(p, kpos));
      if (!translated && valid && !block_ok(p.guard, block)) {
        if (kpos % page_tokens() == 0) report_fault(p.guard, DeviceFault::kv_block, w.t, block);
        row_fault = 1;
        valid = false;
      }
      if (valid) {
        src = kv_group + block * p.kv_block_stride +
              int64_t{block_token(p, kpos)} * p.kv_token_stride;
      }
    }
  }
  const uint32_t mask = __ballot_sync(0xffffffffu, valid) & 0xffffu;
  const uint32_t dst = smem_addr(wbuf + stage * T::kStageBytes);
  // The step's 16 rows x kChunks 16-byte chunks, flattened over the warp
  // (lane + 32 k): no divergent inner loop, a few instructions per copy.
#pragma unroll
  for (int k = 0; k < T::kCopiesPerLane; ++k) {
    const int i = 32 * k + lane;
    const int tok = i / T::kChunks, c = i % T::kChunks;
    const char* row = reinterpret_cast<const char*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), tok));
    cp_async16(dst + stage_chunk_offset<T>(tok, c), row + c * 16, (mask >> tok) & 1u);
  }
  cp_async_commit();
  return mask;
}

}  // namespace step5::cuda::attn
