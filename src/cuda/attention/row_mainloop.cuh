// Mainloop of the row kernel (paged_kernel.cuh): one warp's online softmax
// over its 16-key steps of the split (steps warp, warp + kWarps, ...),
// each copied by the page source (row_page_source.cuh) kStages - 1 steps
// ahead into the warp's own stage buffers, then S^T = K Q^T, the softmax
// update and O^T += V^T P^T on mma.sync (row_fragments.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/heuristics.h"
#include "cuda/attention/launch.h"
#include "cuda/attention/ptx.cuh"
#include "cuda/attention/row_fragments.cuh"
#include "cuda/attention/row_page_source.cuh"

namespace step5::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;

// One warp's softmax state: O^T accumulators, and per head 8 nt + c0 + e
// (c0 = 2 (lane % 4)) its running maximum, this lane's part of its sum
// (the whole sum once row_mainloop returns) and its logit scale in log2
// units (its Q may be f16, scaled). Declared in reverse order of their
// initialization: the field order changes the order of the step loop's
// carried values in the PTX, and with acc first ptxas allocated the bf16
// SWA D = 192 compact-tile kernel differently (179 registers, not 181).
template <int D, int kNT>
struct RowSoftmax {
  float scale_log2[kNT][2];
  float l[kNT][2];
  float m[kNT][2];
  float acc[D / 16][kNT][4];
};

// Runs the warp's my_steps steps of work `w` into `st`; `qb` is Q as
// begin_row loaded it before the kernel's wait (fp8: made f16 here where
// that is exact, q_cols_to_f16), `smem` the CTA's stage buffers. The
// warp's kStages buffers, at warp * kWarpBytes, are located here, after
// the softmax state's setup: located by the caller, the fp8 SWA D = 128
// kernel with two head tiles came out of ptxas with 232 registers instead
// of 230. Returns with every copy of the warp waited for, so the CTA's
// buffers may be reused after a __syncthreads.
template <class T, int kNT>
__device__ __forceinline__ void row_mainloop(const PagedAttentionParams& p, const RowWork& w,
                                             bool translated, int warp, int lane, int32_t my_steps,
                                             uint32_t (&qb)[T::kDim / 16][kNT][2],
                                             unsigned char* smem, int& row_fault,
                                             RowSoftmax<T::kDim, kNT>& st) {
  constexpr int D = T::kDim;
  constexpr int kWarps = attention_warps();
  const int r0 = lane / 4;

#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) st.acc[mt][nt][e] = 0.0f;
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      st.m[nt][e] = -INFINITY;
      st.l[nt][e] = 0.0f;
      st.scale_log2[nt][e] = p.softmax_scale * (T::kIsFp8 ? p.k_scale : 1.0f) * kLog2e;
    }
  }
  bool q_f16 = false;
  if constexpr (T::kIsFp8) {
    float col_scale[kNT][2];
    q_f16 = q_cols_to_f16<T, kNT>(lane, qb, col_scale);
    if (q_f16) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        st.scale_log2[nt][0] *= col_scale[nt][0];
        st.scale_log2[nt][1] *= col_scale[nt][1];
      }
    }
  }

  unsigned char* wbuf = smem + warp * T::kWarpBytes;
  const char* kv_group = static_cast<const char*>(p.kv) + int64_t{w.g} * p.kv_head_stride;
  auto issue = [&](int32_t step, int stage) {
    return issue_step<T>(p, w, translated, kv_group, lane, wbuf, row_fault, step, stage);
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
          const float x =
              ((mask_cur >> key) & 1u) ? s[nt][e] * st.scale_log2[nt][e & 1] : -INFINITY;
          s[nt][e] = x;
          tmax[nt][e & 1] = fmaxf(tmax[nt][e & 1], x);
        }
      }
      float m_use[kNT][2];
      move_running_max_cols<D, kNT>(tmax, st.m, st.l, st.acc, m_use);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = exp2f(s[nt][e] - m_use[nt][e & 1]);
          st.l[nt][e & 1] += s[nt][e];
        }
      }

      // O^T += V^T P^T.
      uint32_t pb[kNT][2];
      pack_pt<T, kNT>(s, pb);
      vp_step<T, kNT>(rows, lane, pb, st.acc);
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
      st.l[nt][e] += __shfl_xor_sync(0xffffffffu, st.l[nt][e], 4);
      st.l[nt][e] += __shfl_xor_sync(0xffffffffu, st.l[nt][e], 8);
      st.l[nt][e] += __shfl_xor_sync(0xffffffffu, st.l[nt][e], 16);
    }
  }
}

}  // namespace step5::cuda::attn
