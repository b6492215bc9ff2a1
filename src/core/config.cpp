#include "step5/config.h"

#include <cmath>

#include "core/check.h"
#include "step5/cache.h"

namespace step5 {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::out_of_range: return "out_of_range";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::device_error: return "device_error";
    case ErrorCode::io_error: return "io_error";
  }
  return "?";
}

const char* layer_kind_name(LayerKind kind) {
  return kind == LayerKind::csa ? "csa" : "swa";
}

float LayerConfig::softmax_scale() const {
  return scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_size));
}

namespace {

using detail::require;
constexpr ErrorCode kBad = ErrorCode::invalid_argument;

bool finite_positive(float x) {
  return std::isfinite(x) && x > 0.0f;
}

}  // namespace

void validate_config(const LayerConfig& c) {
  require(c.kind == LayerKind::csa || c.kind == LayerKind::swa, kBad,
          "config.kind: expected csa or swa, got ", static_cast<int>(c.kind));
  // Upper bounds (docs/contract.md, "Sizes"): 8x the largest head counts of
  // published models, and they keep every product of sizes (H*D, a block's
  // bytes, n*H*D) far from integer overflow.
  require(c.num_heads >= 1 && c.num_heads <= kMaxHeads, kBad, "config.num_heads: expected 1..",
          kMaxHeads, ", got ", c.num_heads);
  require(c.num_kv_heads >= 1 && c.num_kv_heads <= kMaxHeads, kBad,
          "config.num_kv_heads: expected 1..", kMaxHeads, ", got ", c.num_kv_heads);
  require(c.num_heads % c.num_kv_heads == 0, kBad,
          "config.num_heads: expected a multiple of num_kv_heads (", c.num_kv_heads, "), got ",
          c.num_heads);
  require(c.head_size >= 8 && c.head_size <= 256 && c.head_size % 8 == 0, kBad,
          "config.head_size: expected a multiple of 8 in 8..256 (192 for Step5), got ",
          c.head_size);
  require(c.block_size >= kRegionSize && c.block_size % kRegionSize == 0 && c.block_size <= 1024,
          kBad, "config.block_size: expected a multiple of 8 in 8..1024, got ", c.block_size);
  require(c.kv_dtype == DType::bf16 || c.kv_dtype == DType::fp8_e4m3, kBad,
          "config.kv_dtype: expected bf16 or fp8_e4m3, got ", dtype_name(c.kv_dtype));
  require(finite_positive(c.k_scale), kBad, "config.k_scale: expected a finite value > 0, got ",
          c.k_scale);
  require(finite_positive(c.v_scale), kBad, "config.v_scale: expected a finite value > 0, got ",
          c.v_scale);
  require(c.scale == 0.0f || finite_positive(c.scale), kBad,
          "config.scale: expected 0 (= 1/sqrt(head_size)) or a finite value > 0, got ", c.scale);
  require(c.spec_tokens >= 0 && c.spec_tokens <= 15, kBad,
          "config.spec_tokens: expected 0..15, got ", c.spec_tokens);
  if (c.kind == LayerKind::csa) {
    require(c.index_heads >= 1 && c.index_heads <= 64, kBad,
            "config.index_heads: expected 1..64, got ", c.index_heads);
    require(c.index_dim >= 8 && c.index_dim <= 1024 && c.index_dim % 8 == 0, kBad,
            "config.index_dim: expected a multiple of 8 in 8..1024, got ", c.index_dim);
    require(c.topk >= 1 && c.topk <= 4096, kBad, "config.topk: expected 1..4096, got ", c.topk);
    require(c.summary_dtype == DType::fp8_e4m3 || c.summary_dtype == DType::bf16, kBad,
            "config.summary_dtype: expected fp8_e4m3 or bf16, got ", dtype_name(c.summary_dtype));
    // A summary row is Di elements in whole 16-byte units (the region stride
    // every backend requires), so fp8 summaries need Di % 16 == 0.
    require(c.summary_dtype != DType::fp8_e4m3 || c.index_dim % 16 == 0, kBad,
            "config.index_dim: expected a multiple of 16 with fp8_e4m3 summaries (a summary row "
            "fills whole 16-byte units), got ",
            c.index_dim);
  } else {
    require(c.window >= 1, kBad, "config.window: expected >= 1, got ", c.window);
  }
}

std::string describe(const LayerConfig& c) {
  std::string s =
      detail::concat(layer_kind_name(c.kind), " H=", c.num_heads, " G=", c.num_kv_heads,
                     " D=", c.head_size, " B=", c.block_size, " kv=", dtype_name(c.kv_dtype));
  if (c.kv_dtype == DType::fp8_e4m3)
    s += detail::concat(" k_scale=", c.k_scale, " v_scale=", c.v_scale);
  if (c.spec_tokens) s += detail::concat(" mtp=", c.spec_tokens);
  if (c.kind == LayerKind::csa) {
    s += detail::concat(" I=", c.index_heads, " Di=", c.index_dim, " K=", c.topk,
                        " summary=", dtype_name(c.summary_dtype));
  } else {
    s += detail::concat(" W=", c.window);
  }
  return s;
}

// ---- cache sizing --------------------------------------------------------

size_t kv_bytes_per_block(const LayerConfig& c) {
  return static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.block_size) * 2u *
         static_cast<size_t>(c.head_size) * dtype_size(c.kv_dtype);
}

size_t summary_bytes_per_block(const LayerConfig& c) {
  if (c.kind != LayerKind::csa) return 0;
  return static_cast<size_t>(c.block_size / kRegionSize) * static_cast<size_t>(c.index_dim) *
         dtype_size(c.summary_dtype);
}

size_t cache_bytes_per_block(const LayerConfig& c) {
  size_t bytes = kv_bytes_per_block(c) + summary_bytes_per_block(c);
  return (bytes + 15u) & ~size_t{15};
}

size_t ring_row_bytes(const LayerConfig& c) {
  size_t bytes = static_cast<size_t>(c.index_dim) * 2u + 4u;
  return (bytes + 15u) & ~size_t{15};
}

size_t ring_entry_bytes(const LayerConfig& c) {
  return ring_row_bytes(c) * static_cast<size_t>(c.ring_capacity());
}

LayerCache packed_layer_cache(const LayerConfig& c, void* blocks, int64_t num_blocks,
                              int64_t block_stride, void* ring, int64_t num_ring_entries,
                              Device device) {
  validate_config(c);
  require(block_stride >= static_cast<int64_t>(cache_bytes_per_block(c)) && block_stride % 16 == 0,
          kBad, "packed_layer_cache: block_stride expected a multiple of 16 >= ",
          cache_bytes_per_block(c), ", got ", block_stride);
  LayerCache cache;
  const auto kv_elem = static_cast<int64_t>(dtype_size(c.kv_dtype));
  cache.kv.data = blocks;
  cache.kv.dtype = c.kv_dtype;
  cache.kv.device = device;
  cache.kv.num_blocks = num_blocks;
  cache.kv.block_stride = block_stride;
  cache.kv.token_stride = 2 * c.head_size * kv_elem;
  cache.kv.head_stride = cache.kv.token_stride * c.block_size;
  if (c.kind == LayerKind::csa) {
    cache.summaries.data = blocks ? static_cast<char*>(blocks) + kv_bytes_per_block(c) : nullptr;
    cache.summaries.dtype = c.summary_dtype;
    cache.summaries.device = device;
    cache.summaries.num_blocks = num_blocks;
    cache.summaries.block_stride = block_stride;
    cache.summaries.region_stride = c.index_dim * static_cast<int64_t>(dtype_size(c.summary_dtype));
    cache.ring.data = ring;
    cache.ring.device = device;
    cache.ring.num_entries = num_ring_entries;
    cache.ring.entry_stride = static_cast<int64_t>(ring_entry_bytes(c));
  }
  return cache;
}

InterleavedBlocks interleaved_blocks(const std::vector<LayerConfig>& layers) {
  require(!layers.empty(), kBad, "interleaved_blocks: layers expected at least one, got none");
  InterleavedBlocks out;
  for (const LayerConfig& c : layers) {
    validate_config(c);
    out.layer_offset.push_back(out.block_stride);
    // cache_bytes_per_block is a multiple of 16, so every offset is too.
    out.block_stride += static_cast<int64_t>(cache_bytes_per_block(c));
  }
  return out;
}

}  // namespace step5
