// Cache sizing and strided views (SPEC section 6). The engine owns the
// memory and the block allocator; these views say where things live.
//
// All strides here are in BYTES, because one engine buffer may interleave
// tensors of different dtypes (KV beside fp8 summaries inside a block).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "step5/config.h"
#include "step5/tensor.h"

namespace step5 {

// Paged KV of one layer. Token `o` of KV head `g` in block `b` stores K then
// V (2*D values of kv_dtype) contiguously at
//   data + b*block_stride + g*head_stride + o*token_stride.
struct KVCacheView {
  void* data = nullptr;
  DType dtype = DType::bf16;  // bf16 or fp8_e4m3; must match the config
  Device device = Device::host;
  int64_t num_blocks = 0;
  int64_t block_stride = 0;  // bytes
  int64_t head_stride = 0;   // bytes
  int64_t token_stride = 0;  // bytes; at least 2*D*dtype_size
};

// CSA region summaries beside the KV: region `i` (0 <= i < B/8) of block `b`
// holds Di values of summary_dtype at data + b*block_stride + i*region_stride.
// Block ids are the KV block ids: the summary of region j of a request lives
// in the block that holds its positions 8j..8j+7.
struct SummaryCacheView {
  void* data = nullptr;
  DType dtype = DType::fp8_e4m3;  // fp8_e4m3 or bf16; must match the config
  Device device = Device::host;
  int64_t num_blocks = 0;
  int64_t block_stride = 0;   // bytes
  int64_t region_stride = 0;  // bytes; at least Di*dtype_size
};

// Per-request ring of raw index rows of the open region (SPEC 3). Entry `e`
// is one request's state; row `s` (0 <= s < capacity) of it holds
// index_key (Di bf16) followed by index_z (f32) at
//   data + e*entry_stride + s*ring_row_bytes(config).
// The row for position p sits in slot p % capacity.
struct RingView {
  void* data = nullptr;
  Device device = Device::host;
  int64_t num_entries = 0;
  int64_t entry_stride = 0;  // bytes; at least ring_entry_bytes(config)
};

// Everything one layer reads and writes across steps. For SWA layers the
// summaries and ring are unused and may be left empty.
struct LayerCache {
  KVCacheView kv;
  SummaryCacheView summaries;
  RingView ring;
};

// Bytes of KV in one block: G * B * 2D * sizeof(kv_dtype).
size_t kv_bytes_per_block(const LayerConfig& config);
// Bytes of region summaries in one block: (B/8) * Di * sizeof(summary_dtype);
// 0 for SWA layers.
size_t summary_bytes_per_block(const LayerConfig& config);
// Everything one block needs in the packed layout below.
size_t cache_bytes_per_block(const LayerConfig& config);
// One ring row: Di bf16 then one f32, padded to 16 bytes for vector access.
size_t ring_row_bytes(const LayerConfig& config);
// One ring entry: ring_capacity() rows.
size_t ring_entry_bytes(const LayerConfig& config);

// The packed per-block layout (the seed's BLNHC): each block of
// cache_bytes_per_block() bytes holds KV as [G, B, 2D] followed by the
// summaries as [B/8, Di]. `block_stride` may exceed the packed size so an
// engine can interleave layers; it must be a multiple of 16.
LayerCache packed_layer_cache(const LayerConfig& config, void* blocks, int64_t num_blocks,
                              int64_t block_stride, void* ring, int64_t num_ring_entries,
                              Device device);

// The seed's BLNHC layout: the layer dimension inside the block. One block
// of `block_stride` bytes holds every layer's packed block (above) for the
// same tokens, layer i at byte `layer_offset[i]` (multiples of 16), so all
// layers share one block table and one allocator. Layer i's cache is
//   packed_layer_cache(layers[i], base + layer_offset[i], num_blocks,
//                      block_stride, ring_i, entries, device).
struct InterleavedBlocks {
  int64_t block_stride = 0;  // bytes of one block, all layers
  std::vector<int64_t> layer_offset;
};
InterleavedBlocks interleaved_blocks(const std::vector<LayerConfig>& layers);

}  // namespace step5
