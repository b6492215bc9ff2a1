// Epilogue of the row kernel (paged_kernel.cuh): the CTA's warps merge
// their softmax states (row_mainloop.cuh) through shared memory, then the
// CTA stores its (row, group)'s heads, gated, as bf16 (one split), or
// writes its fp32 partial and, if it is the last split of the row to
// finish, combines them all (epilogue.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/fragments.cuh"
#include "cuda/attention/heuristics.h"
#include "cuda/attention/launch.h"
#include "cuda/attention/row_fragments.cuh"
#include "cuda/attention/row_mainloop.cuh"
#include "cuda/attention/row_page_source.cuh"

namespace step5::cuda::attn {

// `smem`: the CTA's stage buffers, free once every warp has waited for its
// copies (T::kBufferBytes >= the merge's kMergeBytes). A faulted row (or
// split: `bad_row` nonzero, `row_fault`) comes out NaN, through the combine
// as well. `c0`: the lane's first head column, 2 (lane % 4).
template <class T, int kNT>
__device__ __forceinline__ void finish_row(const PagedAttentionParams& p, const RowWork& w,
                                           int bad_row, int warp, int lane, int num_splits, int hpg,
                                           int c0, const int& row_fault,
                                           const RowSoftmax<T::kDim, kNT>& st,
                                           unsigned char* smem) {
  constexpr int D = T::kDim;
  constexpr int kWarps = attention_warps();
  const int r0 = lane / 4;

  // Every warp has left its mainloop: the stage buffers are free.
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
          mo[(warp * mma_rows() + head) * D + row_output_dim<T>(mt, e, r0)] = st.acc[mt][nt][e];
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
          ml[(warp * mma_rows() + head) * 2] = st.m[nt][e];
          ml[(warp * mma_rows() + head) * 2 + 1] = st.l[nt][e];
        }
      }
    }
  }
  __syncthreads();

  const float v_scale = T::kIsFp8 ? p.v_scale / kFp8PScale : 1.0f;
  const bool faulted = bad_row != 0 || row_fault != 0;
  for (int idx = static_cast<int>(threadIdx.x); idx < hpg * (D / 8); idx += attention_threads()) {
    const int h = idx / (D / 8);
    const int d0 = (idx % (D / 8)) * 8;
    float mmax = -INFINITY;
    for (int v = 0; v < kWarps; ++v) mmax = fmaxf(mmax, ml[(v * mma_rows() + h) * 2]);
    float lsum = 0.0f;
    float o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int v = 0; v < kWarps; ++v) {
      const float mw = ml[(v * mma_rows() + h) * 2];
      const float wt = mw == -INFINITY ? 0.0f : exp2f(mw - mmax);
      lsum += wt * ml[(v * mma_rows() + h) * 2 + 1];
      const float* src = mo + (v * mma_rows() + h) * D + d0;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] += wt * src[j];
    }
    if (faulted) {
      mmax = 0.0f;
      lsum = NAN;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = NAN;
    }
    const int head = w.g * hpg + h;
    if (num_splits == 1) {
      store_output(p, w.t, head, d0, v_scale, lsum, o);
    } else {
      const int64_t slot = (w.local * p.num_heads + head) * num_splits + w.split;
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
  if (num_splits > 1 && last_split(p, num_splits, D, w.local, w.g)) {
    // The merge's arrays are read (last_split's barrier): smem is free.
    static_assert(combine_work_floats(16, max_splits()) * 4 <= T::kBufferBytes,
                  "the combine's weights fit the stage buffers");
    combine_splits<D, attention_threads()>(p, num_splits, v_scale, w.local, w.t, w.g * hpg,
                                           (w.g + 1) * hpg, reinterpret_cast<float*>(smem));
  }
}

}  // namespace step5::cuda::attn
