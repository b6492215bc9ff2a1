// Launches of one compiled (D, heads-per-group) instance; defined in
// instance.cuh and instantiated once per D in instance_d*.cu so the 18
// (D, H/G) x {bf16, fp8} x {CSA, SWA} kernels compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "cuda/attention/launch.h"

namespace step5::cuda::attn {

// Runs the attention kernel (and the combine when num_splits > 1) for
// validated params.
template <int D, int HPG>
void run_paged(const PagedAttentionParams& params, int num_splits, cudaStream_t stream);

}  // namespace step5::cuda::attn
