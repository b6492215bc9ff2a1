// The online softmax's running-maximum update: the step shared by every
// layout, and its use in the heads-on-M layout (fragments.cuh) of the
// portable tile kernel (tile_attention/mainloop.cuh); the row kernel's, for
// its keys-on-M layout, is in row_fragments.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace step5::cuda::attn {

// Moves a running maximum m to include x (the new logits' maximum, already
// reduced over the lanes that share the row): alpha rescales what was
// accumulated under the old maximum (exactly 1 when it did not move), m_use
// is what to subtract from the new logits before exp2, the new maximum or 0
// while the row has no key (m stays -inf; this guards exp2(-inf - -inf)).
__device__ __forceinline__ void advance_running_max(float& m, float x, float& alpha, float& m_use) {
  const float m_new = fmaxf(m, x);
  alpha = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
  m_use = m_new == -INFINITY ? 0.0f : m_new;
  m = m_new;
}

// One lane's two MMA rows (r0: index 0, r0 + 8: index 1) after new logits
// whose per-lane maximum is `tmax`: reduces tmax over the four lanes that
// share the rows, moves the running maximum m, rescales the running sum l
// and, when some row's maximum moved, the accumulators acc (alpha is
// exactly 1 otherwise: after the first steps that is rare, and it saves
// D / 2 multiplies). Returns m_use (advance_running_max).
template <int D>
__device__ __forceinline__ void move_running_max(float (&tmax)[2], float (&m)[2], float (&l)[2],
                                                 float (&acc)[D / 8][4], float (&m_use)[2]) {
  float alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
    tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
    advance_running_max(m[r], tmax[r], alpha[r], m_use[r]);
    l[r] *= alpha[r];
  }
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      acc[nd][0] *= alpha[0];
      acc[nd][1] *= alpha[0];
      acc[nd][2] *= alpha[1];
      acc[nd][3] *= alpha[1];
    }
  }
}

}  // namespace step5::cuda::attn
