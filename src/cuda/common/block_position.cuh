// Where a cache position lives in the paged cache: its block-table column
// and its token inside that block, for the kernels whose params carry a
// block shift (the row attention's page source and the K/V write). The
// tile, summary and indexer kernels still divide by the block size
// themselves (32-bit; not yet moved here).
#pragma once

#include <cstdint>

namespace step5::cuda {

// `shift` is log2(`size`) when the block size is a power of two (as every
// engine's block sizes are) and -1 otherwise: a shift and a mask then
// replace a division, which for 64-bit positions is a long instruction
// sequence.
template <class T>
__device__ __forceinline__ T block_of(T pos, int32_t shift, int32_t size) {
  return shift >= 0 ? pos >> shift : pos / size;
}
template <class T>
__device__ __forceinline__ T token_in_block(T pos, int32_t shift, int32_t size) {
  return shift >= 0 ? pos & (size - 1) : pos % size;
}

}  // namespace step5::cuda
