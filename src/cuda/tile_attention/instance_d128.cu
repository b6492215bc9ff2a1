// Instances of the tile attention family for D = 128.
#include "cuda/tile_attention/instance.cuh"

namespace step5::cuda::tiled {

template void run_tiles<128>(const TileAttentionParams&, cudaStream_t);
template size_t tile_smem_bytes<128>(bool);
template size_t tile_wgmma_smem_bytes<128>();

}  // namespace step5::cuda::tiled
