// Timing of `step5attn bench`: CUDA events around the work, each run after
// a 256 MB device write that evicts the 50 MB L2, the median of `reps`
// runs after two warm-ups.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "step5/testing/device_memory.h"
#include "step5attn/cuda_check.h"

namespace step5::tool::bench {

class Timer {
 public:
  Timer() : flush_(Device::cuda, size_t{256} << 20) {
    STEP5_TOOL_CUDA_CHECK(cudaEventCreate(&start_));
    STEP5_TOOL_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Two warm-up runs, then the median of `reps` L2-cold runs of `op` on
  // `stream`, in ms.
  template <class F>
  double median_ms(F&& op, int reps, cudaStream_t stream = nullptr) {
    std::vector<float> times;
    for (int i = -2; i < reps; ++i) {
      STEP5_TOOL_CUDA_CHECK(cudaMemsetAsync(flush_.data(), i & 0xff, flush_.bytes(), stream));
      STEP5_TOOL_CUDA_CHECK(cudaEventRecord(start_, stream));
      op();
      STEP5_TOOL_CUDA_CHECK(cudaEventRecord(stop_, stream));
      STEP5_TOOL_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      STEP5_TOOL_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      if (i >= 0) times.push_back(ms);
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
  }

 private:
  sim::DeviceBuffer flush_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace step5::tool::bench
