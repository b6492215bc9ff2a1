// Instances of the paged attention family for D = 192.
#include "cuda/attention/instance.cuh"

namespace step5::cuda::attn {

template void run_paged<192>(const PagedAttentionParams&, int, cudaStream_t);

}  // namespace step5::cuda::attn
