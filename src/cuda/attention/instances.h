// Launches of one compiled head size D; defined in instance.cuh and
// instantiated once per D in instance_d*.cu so the 12 D x {bf16, fp8} x
// {CSA, SWA} kernels compile in parallel. Heads per group are a run-time
// value of every kernel.
#pragma once

#include <cuda_runtime.h>

#include "cuda/attention/launch.h"

namespace step5::cuda::attn {

// Runs the attention kernel (and the combine when num_splits > 1) for
// validated params.
template <int D>
void run_paged(const PagedAttentionParams& params, int num_splits, cudaStream_t stream);

}  // namespace step5::cuda::attn
