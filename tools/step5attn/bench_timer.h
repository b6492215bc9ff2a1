// Timing of `step5attn bench`: CUDA events around the work, each run after
// a 256 MB device write that evicts the 50 MB L2, the median of `reps`
// runs after two warm-ups.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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

// Host time of one forward call in us: 92 calls (a Step5 model's layers),
// `forward(i)` for i = 0..91, none waiting for the GPU, timed in batches
// that leave at most ~256 launches queued, the stream drained between
// batches (outside the clock). 92 forwards in one go measured the GPU
// instead whenever their launches filled the launch queue: the verify rows
// at 1M x 128 requests (eight or nine score chunks, ~25-28 launches each)
// reported 3.3-4.3 ms per forward in the eighth session's sweep.
template <class F>
double host_us_per_forward(F&& forward, int64_t launches_per_forward, cudaStream_t stream) {
  constexpr int kCalls = 92;
  constexpr int64_t kQueued = 256;
  const int batch = static_cast<int>(
      std::clamp<int64_t>(kQueued / std::max<int64_t>(1, launches_per_forward), 1, kCalls));
  double us = 0;
  for (int done = 0; done < kCalls; done += batch) {
    STEP5_TOOL_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = done; i < std::min(kCalls, done + batch); ++i) forward(i);
    const auto t1 = std::chrono::steady_clock::now();
    us += std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  STEP5_TOOL_CUDA_CHECK(cudaStreamSynchronize(stream));
  return us / kCalls;
}

}  // namespace step5::tool::bench
