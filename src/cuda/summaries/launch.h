// The fused cache update of a CSA forward (cache_update.cuh).
#pragma once

#include <cuda_runtime.h>

#include "cuda/kv_write/params.h"
#include "cuda/summaries/params.h"

namespace step5::cuda {

// K/V write and summaries of the step's closing regions in one launch; the
// ring is not written (the forward's select launch does that).
void launch_cache_update(const KvWriteParams& kv, const SummaryParams& summaries, DType kv_dtype,
                         DType summary_dtype, int sm_count, cudaStream_t stream);

}  // namespace step5::cuda
