// The paged attention kernel: one CTA per (row, KV group, split); see
// launch.h for the design. Every warp owns a slice of the split's 16-key
// steps, its own double-buffered stage buffers and its own online softmax.
// Its MMAs put keys on M and the group's heads on N, in kNT tiles of 8
// heads (row_fragments.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/fragments.cuh"
#include "cuda/attention/launch.h"
#include "cuda/attention/ptx.cuh"
#include "cuda/attention/row_fragments.cuh"
#include "cuda/attention/tiles.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/programmatic.cuh"
#include "cuda/common/rows.h"
#include "cuda/kv_write/kv_write.cuh"

namespace step5::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;

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

template <class T, int kNT>
__global__ void __launch_bounds__(attention_threads())
    paged_attention_kernel(const PagedAttentionParams p, int num_splits, int32_t max_pages,
                           int32_t table_pages) {
  constexpr int D = T::kDim;
  // Heads per group: 1..8 (kNT = 1) or 9..16 (kNT = 2), the N side.
  const int hpg = p.num_heads / p.num_kv_heads;
  constexpr int kWarps = attention_warps();
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int warp_count[kWarps];
  __shared__ int row_fault;  // a key of this split sits in a block outside the cache

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  int64_t cta = blockIdx.x;
  const int split = static_cast<int>(cta % num_splits);
  cta /= num_splits;
  const int g = static_cast<int>(cta % p.num_kv_heads);
  const int64_t local = cta / p.num_kv_heads;
  const int64_t t =
      p.row_list != nullptr ? int64_t{__ldg(p.row_list + local)} : p.row_begin + local;

  int32_t request = 0;
  int32_t pos = 0;
  if (!row_of(p.rows, t, request, pos)) {
    // A padding row: zeros from the first split (or left to the caller).
    if (split == 0 && p.zero_padding_rows) zero_group_rows<D>(p, t, g, hpg);
    return;
  }
  const int32_t cur = pos / page_tokens();
  // Block-table column of a position and its token inside the block (shifts
  // when B is a power of two, as every engine's block sizes are).
  auto block_column = [&](int32_t kpos) {
    return p.block_shift >= 0 ? kpos >> p.block_shift : kpos / p.block_size;
  };
  auto block_token = [&](int32_t kpos) {
    return p.block_shift >= 0 ? kpos & (p.block_size - 1) : kpos % p.block_size;
  };
  // A position the request's block table cannot hold (negative lengths,
  // seq_lens past the table in a graph replay): no key is read, output NaN.
  const bool bad_row = pos < 0 || !column_ok(p.guard, block_column(pos));
  if (bad_row && threadIdx.x == 0 && g == 0 && split == 0) {
    report_fault(p.guard, pos < 0 ? DeviceFault::bad_position : DeviceFault::past_block_table, t,
                 pos);
  }
  if constexpr (!T::kIsCsa) {
    // The row's own K/V (PagedAttentionParams::write_kv, SWA) by the split
    // that reads its last page, pages floor(lo / 8)..cur (a faulted row:
    // the first split); the barrier below puts it before every copy.
    if (p.write_kv) {
      const int32_t pages = bad_row ? 0 : cur - swa_first_page(pos, p.window) + 1;
      if (split == last_page_split(pages, num_splits)) write_row_kv<T>(p.kv_write, t, g);
    }
  }
  if (threadIdx.x == 0) row_fault = 0;
  // Q of this group's heads as m16n8k16 B fragments; heads >= hpg are zero.
  const int r0 = lane / 4;
  const int c0 = (lane % 4) * 2;
  uint32_t qb[D / 16][kNT][2];
  load_q_cols<T, kNT>(p.query + t * p.query_row_stride + int64_t{g} * hpg * p.query_head_stride,
                      p.query_head_stride, hpg, lane, qb);
  // Launched programmatically (after the selection): the row metadata, Q
  // and the zeros of padding rows need nothing of the forward's earlier
  // grids (written before its first launch, or not read by them), so their
  // loads overlap the wait and the page list; the selection and the cache
  // pages are read only after the previous grid has ended.
  wait_for_previous_grid();
  __syncthreads();

  // The row's page list: CSA compacted into shared memory, SWA implicit.
  // Then the split's block ids (tiles.h).
  int32_t* pages = reinterpret_cast<int32_t*>(smem + T::kBufferBytes);
  int32_t lo = 0;
  int32_t first = 0;
  int32_t num_pages = 0;
  if (bad_row) {
    num_pages = 0;
  } else if constexpr (T::kIsCsa) {
    const int32_t* sel =
        p.selected + (t - p.row_begin) * p.selected_row_stride + g * p.selected_group_stride;
    num_pages = compact_pages<attention_threads()>(sel, p.topk, cur, pages, warp_count);
  } else {
    lo = max(0, pos - p.window + 1);
    first = swa_first_page(pos, p.window);
    num_pages = cur - first + 1;
  }
  const SplitPages range = split_pages(num_pages, num_splits, split);
  const int32_t begin = range.begin;
  const int32_t end = range.end;
  const int32_t num_steps = (end - begin + pages_per_step() - 1) / pages_per_step();
  int32_t my_steps = num_steps > warp ? (num_steps - warp + kWarps - 1) / kWarps : 0;

  // The split's pages translated to cache blocks up front, all threads at
  // once: the copy loop then reads block ids from shared memory instead of
  // waiting on a dependent block-table load every step (that load's latency
  // bounded the step rate, so fp8 ran no faster than bf16). A split longer
  // than the table (very wide windows) looks blocks up as it goes.
  int32_t* blocks = pages + (T::kIsCsa ? max_pages : 0);
  const int32_t* bt = p.block_table + int64_t{request} * p.block_table_stride;
  const bool translated = end - begin <= table_pages;
  if (translated) {
    // kBatch lookups in flight per thread before the first is stored (a
    // CSA split of 513 pages: one round trip to memory, not five).
    constexpr int kBatch = 8;
    constexpr int kThreads = attention_threads();
    for (int32_t e0 = begin; e0 < end; e0 += kBatch * kThreads) {
      int32_t block[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int32_t e = e0 + b * kThreads + static_cast<int32_t>(threadIdx.x);
        const int32_t region = e < end ? (T::kIsCsa ? pages[e] : first + e) : 0;
        block[b] = e < end ? __ldg(bt + block_column(region * page_tokens())) : 0;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int32_t e = e0 + b * kThreads + static_cast<int32_t>(threadIdx.x);
        if (e >= end) continue;
        if (!block_ok(p.guard, block[b])) {
          report_fault(p.guard, DeviceFault::kv_block, t, block[b]);
          row_fault = 1;
        }
        blocks[e - begin] = block[b];
      }
    }
    __syncthreads();
    if (row_fault != 0) my_steps = 0;
  }

  float acc[D / 16][kNT][4];
#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
    }
  }
  // Running maximum and (this lane's part of the) sum of heads 8 nt + c0 + e.
  float m[kNT][2], l[kNT][2];
  // Logit scale of those heads (their Q may be f16, scaled).
  float scale_log2[kNT][2];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      m[nt][e] = -INFINITY;
      l[nt][e] = 0.0f;
      scale_log2[nt][e] = p.softmax_scale * (T::kIsFp8 ? p.k_scale : 1.0f) * kLog2e;
    }
  }
  bool q_f16 = false;
  if constexpr (T::kIsFp8) {
    float col_scale[kNT][2];
    q_f16 = q_cols_to_f16<T, kNT>(lane, qb, col_scale);
    if (q_f16) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        scale_log2[nt][0] *= col_scale[nt][0];
        scale_log2[nt][1] *= col_scale[nt][1];
      }
    }
  }

  unsigned char* wbuf = smem + warp * T::kWarpBytes;
  const char* kv_head = static_cast<const char*>(p.kv) + int64_t{g} * p.kv_head_stride;

  // Issues the cp.async copies of warp step `step` into `stage`; returns the
  // 16-bit mask of keys that are in the row's key set (others zero-filled).
  auto issue = [&](int32_t step, int stage) -> uint32_t {
    bool valid = false;
    const char* src = static_cast<const char*>(p.kv);
    if (lane < keys_per_step()) {
      const int32_t e = begin + step * pages_per_step() + lane / page_tokens();
      if (e < end) {
        const int32_t region = T::kIsCsa ? pages[e] : first + e;
        const int32_t kpos = region * page_tokens() + lane % page_tokens();
        valid = kpos >= lo && kpos <= pos;
        const int64_t block = !valid       ? 0
                              : translated ? blocks[e - begin]
                                           : __ldg(bt + block_column(kpos));
        if (!translated && valid && !block_ok(p.guard, block)) {
          if (kpos % page_tokens() == 0) report_fault(p.guard, DeviceFault::kv_block, t, block);
          row_fault = 1;
          valid = false;
        }
        if (valid) {
          src =
              kv_head + block * p.kv_block_stride + int64_t{block_token(kpos)} * p.kv_token_stride;
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
  };

  // kStages-deep cp.async pipeline per warp. The 16-bit key masks of the
  // steps in flight queue up in one register, oldest in the low bits.
  constexpr int S = T::kStages;
  uint64_t masks = 0;
#pragma unroll
  for (int k = 0; k < S - 1; ++k) {
    const uint64_t mask = k < my_steps ? issue(warp + k * kWarps, k) : (cp_async_commit(), 0u);
    masks |= mask << (16 * k);
  }
  // The step loop, with Q K^T in f16 or bf16 (a uniform choice per warp).
  auto steps = [&](auto f16) {
    for (int32_t i = 0; i < my_steps; ++i) {
      const int stage = i % S;
      // The stage of step i - 1 is free (its reads ended at the last
      // __syncwarp), so step i + S - 1 goes there.
      const int32_t ahead = i + S - 1;
      const uint64_t mask_ahead =
          ahead < my_steps ? issue(warp + ahead * kWarps, ahead % S) : (cp_async_commit(), 0u);
      masks |= mask_ahead << (16 * (S - 1));
      cp_async_wait<S - 1>();
      __syncwarp();
      const uint32_t mask_cur = static_cast<uint32_t>(masks & 0xffffu);
      masks >>= 16;
      const unsigned char* rows = wbuf + stage * T::kStageBytes;

      // S^T = K Q^T over the step's 16 keys (keys r0 and r0 + 8 here).
      float s[kNT][4];
      kq_step<T, kNT, decltype(f16)::value>(rows, lane, qb, s);

      // Online softmax in the log2 domain, per head 8 nt + c0 + (e & 1).
      float tmax[kNT][2];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        tmax[nt][0] = tmax[nt][1] = -INFINITY;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = r0 + 8 * (e >> 1);
          const float x = ((mask_cur >> key) & 1u) ? s[nt][e] * scale_log2[nt][e & 1] : -INFINITY;
          s[nt][e] = x;
          tmax[nt][e & 1] = fmaxf(tmax[nt][e & 1], x);
        }
      }
      float m_use[kNT][2];
      move_running_max_cols<D, kNT>(tmax, m, l, acc, m_use);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = exp2f(s[nt][e] - m_use[nt][e & 1]);
          l[nt][e & 1] += s[nt][e];
        }
      }

      // O^T += V^T P^T.
      uint32_t pb[kNT][2];
      pack_pt<T, kNT>(s, pb);
      vp_step<T, kNT>(rows, lane, pb, acc);
      __syncwarp();
    }
  };
  if (T::kIsFp8 && q_f16) {
    steps(std::integral_constant<bool, T::kIsFp8>{});
  } else {
    steps(std::false_type{});
  }

  // Each lane summed its own keys: the head's sum is over the 8 lanes of t.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], 4);
      l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], 8);
      l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], 16);
    }
  }

  // Merge the warps' (m, l, acc) through shared memory (stage buffers are
  // free: every warp waited for all of its copies).
  __syncthreads();
  float* mo = reinterpret_cast<float*>(smem);  // [warp][16][D]
  float* ml = mo + kWarps * mma_rows() * D;    // [warp][16][2]
#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int head = 8 * nt + c0 + (e & 1);
        if (head < hpg) {
          mo[(warp * mma_rows() + head) * D + row_output_dim<T>(mt, e, r0)] = acc[mt][nt][e];
        }
      }
    }
  }
  if (r0 == 0) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 8 * nt + c0 + e;
        if (head < hpg) {
          ml[(warp * mma_rows() + head) * 2] = m[nt][e];
          ml[(warp * mma_rows() + head) * 2 + 1] = l[nt][e];
        }
      }
    }
  }
  __syncthreads();

  const float v_scale = T::kIsFp8 ? p.v_scale / kFp8PScale : 1.0f;
  // A faulted row (or split) gives NaN, through the combine as well.
  const bool faulted = bad_row || row_fault != 0;
  for (int idx = static_cast<int>(threadIdx.x); idx < hpg * (D / 8); idx += attention_threads()) {
    const int h = idx / (D / 8);
    const int d0 = (idx % (D / 8)) * 8;
    float mmax = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mmax = fmaxf(mmax, ml[(w * mma_rows() + h) * 2]);
    float lsum = 0.0f;
    float o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int w = 0; w < kWarps; ++w) {
      const float mw = ml[(w * mma_rows() + h) * 2];
      const float wt = mw == -INFINITY ? 0.0f : exp2f(mw - mmax);
      lsum += wt * ml[(w * mma_rows() + h) * 2 + 1];
      const float* src = mo + (w * mma_rows() + h) * D + d0;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] += wt * src[j];
    }
    if (faulted) {
      mmax = 0.0f;
      lsum = NAN;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = NAN;
    }
    const int head = g * hpg + h;
    if (num_splits == 1) {
      store_output(p, t, head, d0, v_scale, lsum, o);
    } else {
      const int64_t slot = (local * p.num_heads + head) * num_splits + split;
      float* part = split_acc(p, num_splits, D) + slot * D + d0;
      *reinterpret_cast<float4*>(part) = make_float4(o[0], o[1], o[2], o[3]);
      *reinterpret_cast<float4*>(part + 4) = make_float4(o[4], o[5], o[6], o[7]);
      if (d0 == 0) {
        float* stats = split_stats(p, num_splits, D) + slot * 2;
        stats[0] = mmax;
        stats[1] = lsum;
      }
    }
  }
  if (num_splits > 1 && last_split(p, num_splits, D, local, g)) {
    combine_splits<D, attention_threads()>(p, num_splits, v_scale, local, t, g * hpg,
                                           (g + 1) * hpg);
  }
}

}  // namespace step5::cuda::attn
