// The paged attention kernel: one CTA per (row, KV group, split); see
// launch.h for the design. Composed of the row page source (which row, its
// setup before the wait for the previous grid, its page list, the copies
// of its steps: row_page_source.cuh), the mainloop (each warp's slice of
// the split's 16-key steps, its own stage buffers and online softmax:
// row_mainloop.cuh) and the epilogue (the warps' merge, the gated store or
// split partials: row_epilogue.cuh). Its MMAs put keys on M and the
// group's heads on N, in kNT tiles of 8 heads (row_fragments.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/heuristics.h"
#include "cuda/attention/launch.h"
#include "cuda/attention/row_epilogue.cuh"
#include "cuda/attention/row_mainloop.cuh"
#include "cuda/attention/row_page_source.cuh"
#include "cuda/common/programmatic.cuh"

namespace step5::cuda::attn {

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

  RowWork w;
  if (!locate_row(p, num_splits, w)) {
    // A padding row: zeros from the first split (or left to the caller). A
    // row of the tile kernel (w.t < 0) is left to it.
    if (w.split == 0 && p.zero_padding_rows && w.t >= 0) zero_group_rows<D>(p, w.t, w.g, hpg);
    return;
  }
  // Launched programmatically (after the selection): a padding row's zeros
  // (above), the row's setup and Q (begin_row) overlap the wait; the
  // selection and the cache pages are read only after the previous grid
  // has ended. The barrier also puts begin_row's K/V write and row_fault
  // reset before the page list, the block translation and every copy.
  uint32_t qb[D / 16][kNT][2];
  const int bad_row = begin_row<T, kNT>(p, num_splits, hpg, lane, row_fault, w, qb);
  // The lane's first head column in the fragments, for the epilogue; here,
  // before the wait: computed in the epilogue, it changed ptxas's
  // allocation of the fp8 D = 192 kernels with two head tiles (one from 4
  // to 64 bytes of spill stores).
  const int c0 = (lane % 4) * 2;
  wait_for_previous_grid();
  __syncthreads();

  int32_t* const pages = reinterpret_cast<int32_t*>(smem + T::kBufferBytes);
  load_row_pages<T>(p, num_splits, bad_row, pages, warp_count, w);
  const int32_t num_steps = (w.end - w.begin + pages_per_step() - 1) / pages_per_step();
  int32_t my_steps = num_steps > warp ? (num_steps - warp + kWarps - 1) / kWarps : 0;
  const bool translated = translate_blocks<T>(p, table_pages, pages + (T::kIsCsa ? max_pages : 0),
                                              row_fault, w, my_steps);

  RowSoftmax<D, kNT> st;
  row_mainloop<T, kNT>(p, w, translated, warp, lane, my_steps, qb, smem, row_fault, st);
  finish_row<T, kNT>(p, w, bad_row, warp, lane, num_splits, hpg, c0, row_fault, st, smem);
}

}  // namespace step5::cuda::attn
