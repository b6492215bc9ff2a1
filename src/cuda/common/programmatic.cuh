// Programmatic dependent launch (sm_90): a kernel launched with
// programmatic stream serialization may start its CTAs while the kernel
// before it in the stream is still running, once every CTA of that kernel
// has allowed it (allow_next_grid) or exited; it must wait for that
// kernel's completion and memory (wait_for_previous_grid) before reading
// or writing anything the earlier kernels touch. Launched normally, both
// are no-ops. Older targets (the compute_80 PTX) compile them away.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace step5::cuda {

#if defined(__CUDACC__)
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif

// The launch attribute for clusters of `cluster_x` CTAs along x.
inline cudaLaunchAttribute cluster_attribute(unsigned cluster_x) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster_x;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  return attribute;
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), with
// programmatic stream serialization when `programmatic` (the kernel then
// calls wait_for_previous_grid first), in thread-block clusters of
// `cluster_x` CTAs along x when above 1 (sm_90+; grid.x a multiple of it).
template <class... Params, class... Args>
cudaError_t launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, bool programmatic, unsigned cluster_x,
                                      Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = programmatic ? 1 : 0;
  attribute[1] = cluster_attribute(cluster_x);
  config.attrs = attribute;
  config.numAttrs = cluster_x > 1 ? 2 : 1;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  // A failed launch is reported here; it is not left for the next launch's
  // cudaGetLastError (check_launch) to find.
  if (status != cudaSuccess) (void)cudaGetLastError();
  return status;
}

template <class... Params, class... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool programmatic, Args&&... args) {
  return launch_kernel_in_clusters(kernel, grid, block, smem, stream, programmatic, 1u,
                                   std::forward<Args>(args)...);
}

}  // namespace step5::cuda
