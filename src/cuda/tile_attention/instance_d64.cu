// Instances of the tile attention family for D = 64.
#include "cuda/tile_attention/instance.cuh"

namespace step5::cuda::tiled {

template void run_tiles<64>(const TileAttentionParams&, cudaStream_t);
template size_t tile_smem_bytes<64>(bool);
template size_t tile_wgmma_smem_bytes<64>();

}  // namespace step5::cuda::tiled
