#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/heuristics.h"
#include "cuda/kv_write/kv_write.cuh"

namespace step5::cuda {

namespace {

// Grid-stride loops cap the grid: more CTAs than this only add scheduling.
constexpr int64_t kMaxBlocks = 65535;

int blocks_for(int64_t work) {
  return static_cast<int>(
      std::clamp<int64_t>((work + kv_write_threads() - 1) / kv_write_threads(), 1, kMaxBlocks));
}

__global__ void fp8_convert_kernel(const float* in, uint8_t* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = float_to_fp8_bits(in[i]);
  }
}

// Every 16-bit pair of e4m3 bytes through the MMA-side conversions.
__global__ void e4m3_widen_kernel(uint32_t* out, int32_t count) {
  for (int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x); i < count;
       i += static_cast<int32_t>(gridDim.x * blockDim.x)) {
    const auto two = static_cast<uint32_t>(i);
    out[3 * i] = e4m3x2_to_f16x2(two);
    out[3 * i + 1] = e4m3x2_hi_to_f16x2(two << 16);
    out[3 * i + 2] = e4m3x2_to_bf16x2(two);
  }
}

}  // namespace

void launch_kv_write(const KvWriteParams& params, DType kv_dtype, cudaStream_t stream) {
  if (params.num_tokens == 0) return;
  const int64_t work = params.num_tokens * params.num_heads * (2 * params.head_size / 8);
  dispatch_storage(kv_dtype, "kv_dtype", [&](auto tag) {
    kv_write_kernel<decltype(tag)><<<blocks_for(work), kv_write_threads(), 0, stream>>>(params);
  });
  check_launch("kv_write_kernel");
}

void launch_fp8_convert(const float* in, uint8_t* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  fp8_convert_kernel<<<blocks_for(count), kv_write_threads(), 0, stream>>>(in, out, count);
  check_launch("fp8_convert_kernel");
}

void launch_e4m3_widen(uint32_t* out, cudaStream_t stream) {
  constexpr int32_t kPairs = 1 << 16;
  e4m3_widen_kernel<<<blocks_for(kPairs), kv_write_threads(), 0, stream>>>(out, kPairs);
  check_launch("e4m3_widen_kernel");
}

}  // namespace step5::cuda
