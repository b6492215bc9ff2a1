// Whole-layer forwards of the cuda backend: boundary validation first, then
// only kernel launches and async memsets on `stream` (no allocation, no
// synchronization, no host reads of device memory), so uniform steps can be
// captured in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/device.h"
#include "step5/attention.h"

namespace step5::cuda {

void run_forward_csa(const DeviceInfo& device, const LayerConfig& config, const StepDesc& step,
                     const StepPlan& plan, const CsaInputs& in, const LayerCache& cache,
                     const LayerOutputs& out, Workspace workspace, cudaStream_t stream);

void run_forward_swa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                     const SwaInputs& in, const KVCacheView& kv, const LayerOutputs& out,
                     Workspace workspace, cudaStream_t stream);

}  // namespace step5::cuda
