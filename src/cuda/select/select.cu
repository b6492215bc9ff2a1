#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/smem_limit.h"
#include "cuda/select/select.cuh"

namespace step5::cuda {

namespace {
constexpr int32_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y
}  // namespace

void launch_select(const SelectParams& params, cudaStream_t stream) {
  if (params.num_rows == 0) return;
  detail::require(params.num_groups <= kMaxGridY, ErrorCode::unsupported,
                  "cuda backend select: num_kv_heads expected <= ", kMaxGridY, ", got ",
                  params.num_groups);
  const dim3 grid(static_cast<unsigned>(params.num_rows), static_cast<unsigned>(params.num_groups));
  auto* kernel = select_kernel<select_threads()>;
  constexpr int smem = static_cast<int>(sizeof(SelectList));
  allow_max_smem(kernel);
  kernel<<<grid, select_threads(), smem, stream>>>(params);
  check_launch("select_kernel");
}

}  // namespace step5::cuda
