// Built only with the cuda backend (the CPU-only build has no CUDA runtime).
#if defined(STEP5_HAVE_CUDA)
#include "step5attn/bench_ceiling.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "step5attn/cuda_check.h"

namespace step5::tool::bench {

namespace {

// Device memory and events freed on every path out (a failed call throws).
struct CopyResources {
  void* src = nullptr;
  void* dst = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ~CopyResources() {
    if (stop != nullptr) cudaEventDestroy(stop);
    if (start != nullptr) cudaEventDestroy(start);
    if (dst != nullptr) cudaFree(dst);
    if (src != nullptr) cudaFree(src);
  }
};

}  // namespace

MeasuredCopy measure_copy_ceiling(size_t free_bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  constexpr int kRuns = 9;
  MeasuredCopy c;
  c.bytes_per_s = std::nan("");
  c.buffer_bytes = std::min(256 * kMiB, free_bytes / 4) / kMiB * kMiB;
  if (c.buffer_bytes < 64 * kMiB) return c;
  CopyResources r;
  STEP5_TOOL_CUDA_CHECK(cudaMalloc(&r.src, c.buffer_bytes));
  STEP5_TOOL_CUDA_CHECK(cudaMalloc(&r.dst, c.buffer_bytes));
  STEP5_TOOL_CUDA_CHECK(cudaEventCreate(&r.start));
  STEP5_TOOL_CUDA_CHECK(cudaEventCreate(&r.stop));
  STEP5_TOOL_CUDA_CHECK(cudaMemsetAsync(r.src, 0x5a, c.buffer_bytes, nullptr));
  // One untimed copy first: the destination's pages are mapped and the
  // copy path warmed.
  STEP5_TOOL_CUDA_CHECK(
      cudaMemcpyAsync(r.dst, r.src, c.buffer_bytes, cudaMemcpyDeviceToDevice, nullptr));
  std::vector<float> ms(kRuns, 0.0f);
  for (float& t : ms) {
    STEP5_TOOL_CUDA_CHECK(cudaEventRecord(r.start, nullptr));
    STEP5_TOOL_CUDA_CHECK(
        cudaMemcpyAsync(r.dst, r.src, c.buffer_bytes, cudaMemcpyDeviceToDevice, nullptr));
    STEP5_TOOL_CUDA_CHECK(cudaEventRecord(r.stop, nullptr));
    STEP5_TOOL_CUDA_CHECK(cudaEventSynchronize(r.stop));
    STEP5_TOOL_CUDA_CHECK(cudaEventElapsedTime(&t, r.start, r.stop));
  }
  std::nth_element(ms.begin(), ms.begin() + kRuns / 2, ms.end());
  const double median_ms = ms[kRuns / 2];
  if (median_ms > 0) c.bytes_per_s = 2.0 * static_cast<double>(c.buffer_bytes) / (median_ms * 1e-3);
  return c;
}

}  // namespace step5::tool::bench
#endif
