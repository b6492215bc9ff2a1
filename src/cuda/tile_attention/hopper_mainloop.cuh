// Mainloop of the Hopper tile attention kernel: the window's region list
// streamed through stage buffers shared by the CTA (hopper_page_copy.cuh:
// each warp copies one region of a stage), and per warpgroup S = Q K^T and
// O += P V on wgmma with an fp32 online softmax in between. sm_90a only.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/common/wgmma_attention.cuh"
#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/hopper_page_copy.cuh"
#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// One thread's share of its warpgroup's 64 rows: MMA rows 16 w + lane / 4
// (index 0) and that + 8 (index 1), which are head lane / 4 of tile rows
// row[0] and row[1] = row[0] + 1; acc in the wgmma D layout (common/wgmma.cuh).
template <int D>
struct HopperState {
  float acc[D / 2];
  float m[2];
  float l[2];           // this thread's partial sums; the epilogue adds the row's four threads
  float scale_log2[2];  // logit scale of each row (Q may be staged as scaled f16)
  int row[2];
  int32_t lo[2];  // attended key positions lo..hi of those rows
  int32_t hi[2];
  uint32_t rows;    // tile rows of this warpgroup (bit mask)
  uint64_t desc_q;  // wgmma descriptor of the warpgroup's Q, k16 step 0
};

// How far a row's running maximum may stay below its true maximum (log2
// units): P values then reach 2^8 at most, exact in fp32 and in bf16's
// range, and O and l are rescaled only when a maximum grows by more.
constexpr float kMaxSlack = 8.0f;

// Two probabilities (at most 2^kMaxSlack) as an A-fragment word: bf16, or
// f16 when kF16 (rounded more finely than bf16 for every p >= 2^-14).
template <bool kF16>
__device__ __forceinline__ uint32_t pack_p(float lo, float hi) {
  if constexpr (kF16) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    return attn::pack_bf16x2(lo, hi);
  }
}

// Issues S = Q K^T of stage `i` for the warpgroup (N = 64 keys, both
// operands in shared memory) into `s` as one wgmma group, not waited for.
// Every thread of the warpgroup calls it (wgmma is warpgroup-wide).
template <int D, bool kF16, class Smem>
__device__ __forceinline__ void hopper_issue_scores(const Smem& sm, int32_t i,
                                                    const HopperState<D>& w,
                                                    float (&s)[hopper_stage_regions() * 4]) {
  constexpr int R = hopper_stage_regions();
  const uint32_t stage = uniform_stage_addr(sm, i);
#pragma unroll
  for (int v = 0; v < R * 4; ++v) s[v] = 0.0f;
  // Q: 8-row groups (tile rows) kQGroupBytes apart; K: 8-key groups
  // (regions) kRegionBytes apart; both at atom kk / 4, columns 16 (kk % 4)
  // onwards inside it.
  const uint64_t desc_k = wgmma::sw128_desc(stage, 16, Smem::kRegionBytes);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t k_offset = (kk / 4) * Smem::kAtomBytes + (kk % 4) * 32;
    wgmma::WgmmaSs<R * 8, kF16>::mma(s, wgmma::desc_advance(w.desc_q, k_offset),
                                     wgmma::desc_advance(desc_k, k_offset), kk > 0 ? 1 : 0);
  }
  wgmma::commit_group();
}

// The scores `s` of stage `i` (landed: the caller waited for their group),
// masked per (row, key) by the regions' row masks and, where a region is
// cut, the rows' key ranges; one online-softmax update; P into `pa` as A
// fragments (k16 step k: S columns 16 k .. 16 k + 15), bf16, or f16 when
// kF16 (Q and the stage are f16: fp8 pages).
template <int D, bool kF16, bool kCsa, class Smem>
__device__ __forceinline__ void hopper_softmax(const Smem& sm, int32_t i,
                                               const uint32_t (&mask)[hopper_stage_regions()],
                                               bool cut, HopperState<D>& w,
                                               float (&s)[hopper_stage_regions() * 4],
                                               uint32_t (&pa)[hopper_stage_regions() / 2][4]) {
  constexpr int R = hopper_stage_regions();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const uint32_t row_bit[2] = {1u << w.row[0], 1u << w.row[1]};

  // S column 8 r + 2 t + e is key 2 t + e of the stage's region r; masked
  // scores become -inf, the maximum is taken on the raw scores (the scale
  // is positive) and the scale folds into the exponent's FMA.
  float tmax[2] = {-INFINITY, -INFINITY};
  const int c0 = 2 * (lane % 4);
  // SWA: inside the window, every key of a stage with no cut region is
  // attended by all of this warp's rows; such stages skip the masks.
  bool whole = false;
  if constexpr (!kCsa) {
    const uint32_t mine = row_bit[0] | row_bit[1];
    whole = !cut;
#pragma unroll
    for (int r = 0; r < R; ++r) whole = whole && (mask[r] & mine) == mine;
  }
  if (whole) {
#pragma unroll
    for (int v = 0; v < R * 4; ++v) tmax[(v >> 1) & 1] = fmaxf(tmax[(v >> 1) & 1], s[v]);
  } else if (!cut) {
    // Row masks only (most stages: testing key ranges in every stage took
    // a build's 8K CSA layer from 2.10 to 2.61 ms on an H100).
#pragma unroll
    for (int v = 0; v < R * 4; ++v) {
      const int h = (v >> 1) & 1;
      const float x = (mask[v / 4] & row_bit[h]) != 0 ? s[v] : -INFINITY;
      s[v] = x;
      tmax[h] = fmaxf(tmax[h], x);
    }
  } else {
    // Row masks and the rows' key ranges; bitwise, not short-circuit, so
    // that ptxas selects instead of branching per key.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int32_t k0 = sm.list_region[i * R + r] * attn::page_tokens() + c0;
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int h = v >> 1;
        const bool inside = (k0 + (v & 1) >= w.lo[h]) & (k0 + (v & 1) <= w.hi[h]);
        const bool in = ((mask[r] & row_bit[h]) != 0) & inside;
        const float x = in ? s[4 * r + v] : -INFINITY;
        s[4 * r + v] = x;
        tmax[h] = fmaxf(tmax[h], x);
      }
    }
  }
  float m_use[2], factor[2];
  bool moved = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
    tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
    const float seen = tmax[h] * w.scale_log2[h];
    const bool move = seen > w.m[h] + kMaxSlack;  // true for a first finite score
    const float m_new = move ? seen : w.m[h];
    m_use[h] = m_new == -INFINITY ? 0.0f : m_new;
    factor[h] = attn::exp2_ftz(w.m[h] - m_use[h]);  // 0 while m was -inf, 1 if unmoved
    moved = moved || move;
    w.l[h] *= factor[h];
    w.m[h] = m_new;
  }
  if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
#pragma unroll
      for (int v = 0; v < 4; ++v) w.acc[4 * j + v] *= factor[v >> 1];
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      s[4 * r + v] = attn::exp2_ftz(fmaf(s[4 * r + v], w.scale_log2[v >> 1], -m_use[v >> 1]));
      w.l[v >> 1] += s[4 * r + v];
    }
    pa[r / 2][2 * (r % 2)] = pack_p<kF16>(s[4 * r], s[4 * r + 1]);
    pa[r / 2][2 * (r % 2) + 1] = pack_p<kF16>(s[4 * r + 2], s[4 * r + 3]);
  }
}

// O += P V of stage `i` (four k16 steps): V of regions 2 k, 2 k + 1 is
// N-major, its atoms (64 columns each) after K's, 8-key groups
// kRegionBytes apart. Issued as one wgmma group, not waited for.
template <int D, bool kF16, class Smem>
__device__ __forceinline__ void hopper_pv(const Smem& sm, int32_t i,
                                          const uint32_t (&pa)[hopper_stage_regions() / 2][4],
                                          HopperState<D>& w) {
  const uint32_t stage = uniform_stage_addr(sm, i);
  const uint64_t desc_v = wgmma::sw128_desc(stage + Smem::kAtomsPerHalf * Smem::kAtomBytes,
                                            Smem::kAtomBytes, Smem::kRegionBytes);
  wgmma::fence();
#pragma unroll
  for (int k = 0; k < hopper_stage_regions() / 2; ++k) {
    wgmma::WgmmaRsNMajor<D, kF16>::mma(w.acc, pa[k],
                                       wgmma::desc_advance(desc_v, 2 * k * Smem::kRegionBytes), 1);
  }
  wgmma::commit_group();
}

// The row masks of list stage `i`'s regions (0 past the list's `length`
// entries) into `mask`; returns their union.
template <class Smem>
__device__ __forceinline__ uint32_t hopper_stage_masks(const Smem& sm, int32_t i, int32_t length,
                                                       uint32_t (&mask)[hopper_stage_regions()]) {
  uint32_t attended = 0;
#pragma unroll
  for (int r = 0; r < hopper_stage_regions(); ++r) {
    const int32_t e = i * hopper_stage_regions() + r;
    mask[r] = e < length ? sm.list_mask[e] : 0u;
    attended |= mask[r];
  }
  return attended;
}

// The stages of a list of `length` regions.
__device__ __forceinline__ int32_t hopper_list_stages(int32_t length) {
  return (length + hopper_stage_regions() - 1) / hopper_stage_regions();
}

// The copies of list stage k (fp8 pages raw), or, when k is `past` the
// list's stages, an empty cp.async group, so that every step commits one
// group (bf16 waits count on that).
template <bool kFp8, class Smem>
__device__ __forceinline__ void hopper_issue_list_stage(const PagedAttentionParams& p,
                                                        const char* kv_head, int32_t k, bool past,
                                                        int32_t length, int32_t key_lo,
                                                        int32_t key_hi, Smem& sm) {
  if (past) {
    attn::cp_async_commit();
  } else if constexpr (kFp8) {
    hopper_issue_stage_fp8(p, kv_head, k, length, key_lo, key_hi, sm);
  } else {
    hopper_issue_stage(p, kv_head, k, length, key_lo, key_hi, sm);
  }
}

// The copies hopper_run_window issues before its first step, of list
// stages [0, S - 2), issued ahead by a caller that has other work for
// their flight time (hopper_run_window with `started`). fp8 pages land
// raw: the format they are widened to (Q's, f16 or bf16) is decided
// later, and hopper_run_window widens them.
template <bool kFp8, class Smem>
__device__ void hopper_start_window(const PagedAttentionParams& p, const char* kv_head,
                                    int32_t length, int32_t key_lo, int32_t key_hi, Smem& sm) {
#pragma unroll 1
  for (int32_t k = 0; k < Smem::kStages - 2; ++k) {
    hopper_issue_list_stage<kFp8>(p, kv_head, k, k >= hopper_list_stages(length), length, key_lo,
                                  key_hi, sm);
  }
}

// Streams list stages [0, ceil(length / 8)) through the pipeline, one
// barrier per step. The warpgroups take turns on the tensor cores: the
// first runs S, softmax and P V of stage i in step i; the second runs the
// P V of stage i - 1 first, then S and softmax of stage i, so each one's
// softmax overlaps the other's MMAs. A stage's buffer therefore lives two
// steps: copies run S - 2 stages ahead. A warpgroup skips a stage none of
// its rows attend. In a step, a warpgroup issues its MMAs (the second
// one's P V of the last stage, then S of this one) before the copies,
// which then overlap them, and waits for them once, after the copies
// (issuing fp8 copies first was 5-7 % slower on an H100). fp8 stages land
// raw and are widened in place at the end of the step that issued them
// (to f16 when kF16), so the next barrier publishes them: they hold no
// registers across the MMAs (loaded into registers instead, they spilled
// at the kernel's 255-register limit in this order). The first warpgroup
// waits for its P V at once in bf16; in fp8 after its widening, which
// overlaps that P V (2 % faster). `started`: hopper_start_window issued
// the first copies.
template <int D, bool kFp8, bool kF16, bool kCsa, class Smem>
__device__ void hopper_run_window(const PagedAttentionParams& p, const char* kv_head,
                                  int32_t length, int32_t key_lo, int32_t key_hi, HopperState<D>& w,
                                  Smem& sm, bool started = false) {
  constexpr int S = Smem::kStages;
  constexpr int R = hopper_stage_regions();
  static_assert(S >= 3, "a stage is read for two steps while the next one is copied");
  const int32_t stages = hopper_list_stages(length);
  const bool lagging = static_cast<int>(threadIdx.x) >= 128;
  // Copies of stage k, and fp8's widening once they landed.
  auto issue_copies = [&](int32_t k) {
    hopper_issue_list_stage<kFp8>(p, kv_head, k, k >= stages, length, key_lo, key_hi, sm);
  };
  auto widen = [&](int32_t k) {
    if constexpr (kFp8) {
      if (k < stages) {
        attn::cp_async_wait<0>();
        hopper_widen_stage_fp8<kF16>(k, sm);
      }
    }
  };
#pragma unroll 1
  for (int32_t k = 0; k < S - 2; ++k) {
    if (!started) issue_copies(k);
    widen(k);
  }
  uint32_t pa[R / 2][4];
  bool pending = false;  // the lagging warpgroup's P of the last step
#pragma unroll 1
  for (int32_t i = 0; i <= stages; ++i) {
    // This thread's copies of stage i (and of Q, the oldest group) are in
    // shared memory (fp8: widened last step); the fence makes them visible
    // to wgmma (the async proxy), the barrier everyone's. The barrier also
    // ends every read of stage i - 2, whose buffer the next copies take.
    if constexpr (!kFp8) attn::cp_async_wait<S - 3>();
    wgmma::fence_proxy_async_smem();
    __syncthreads();
    const int32_t ahead = i + S - 2;
    if (lagging && pending) hopper_pv<D, kF16>(sm, i - 1, pa, w);
    pending = false;
    uint32_t mask[R];
    const uint32_t attended = hopper_stage_masks(sm, i, length, mask);  // 0 in the last step
    const bool scoring = (attended & w.rows) != 0;
    float s[R * 4];
    if (scoring) hopper_issue_scores<D, kF16>(sm, i, w, s);
    issue_copies(ahead);
    wgmma::wait_group<0>();
    if (scoring) {
      hopper_softmax<D, kF16, kCsa>(sm, i, mask, (attended & kCutRegion) != 0, w, s, pa);
      // The second warpgroup's P V waits for the next step; the first's is
      // issued now and waited for before the barrier.
      if (lagging) {
        pending = true;
      } else {
        hopper_pv<D, kF16>(sm, i, pa, w);
        if constexpr (!kFp8) wgmma::wait_group<0>();
      }
    }
    widen(ahead);
    if constexpr (kFp8) wgmma::wait_group<0>();
  }
  attn::cp_async_wait<0>();
  __syncthreads();
}

}  // namespace step5::cuda::tiled
