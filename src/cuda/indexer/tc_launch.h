// Launch of the tensor-core indexer: the one place where the runtime tile N
// and summary dtype become template parameters.
#pragma once

#include <cuda_runtime.h>

#include "cuda/indexer/params.h"

namespace step5::cuda {

// Resident CTAs per SM of the kernel for tile N, summary dtype and dynamic
// shared memory (the occupancy calculator; 0 when it does not fit).
int indexer_tc_ctas_per_sm(int tile_n, DType summary_dtype, size_t smem);

void launch_indexer_tc(const IndexerParams& params, DType summary_dtype, size_t max_smem,
                       cudaStream_t stream);

}  // namespace step5::cuda
