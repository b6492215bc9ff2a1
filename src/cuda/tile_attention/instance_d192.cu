// Instances of the tile attention family for D = 192.
#include "cuda/tile_attention/instance.cuh"

namespace step5::cuda::tiled {

template void run_tiles<192>(const TileAttentionParams&, cudaStream_t);
template size_t tile_smem_bytes<192>(bool);
template size_t tile_wgmma_smem_bytes<192>();

}  // namespace step5::cuda::tiled
