// Instances of the paged attention family for D = 64.
#include "cuda/attention/instance.cuh"

namespace step5::cuda::attn {

template void run_paged<64>(const PagedAttentionParams&, int, cudaStream_t);

}  // namespace step5::cuda::attn
