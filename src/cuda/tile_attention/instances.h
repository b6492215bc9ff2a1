// Launches of one compiled head size D of the tile attention family; defined
// in instance.cuh and instantiated once per D in instance_d*.cu so the
// D x {bf16, fp8} x {CSA, SWA} kernels compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// Launches validated params (kv dtype and page source picked here).
template <int D>
void run_tiles(const TileAttentionParams& params, cudaStream_t stream);

// Dynamic shared memory of the D instance for a kv dtype, and of its
// sm_90a (wgmma) instance.
template <int D>
size_t tile_smem_bytes(bool fp8);
template <int D>
size_t tile_wgmma_smem_bytes();

}  // namespace step5::cuda::tiled
