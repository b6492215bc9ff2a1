// Host side of the paged attention family: parameter checks, the split
// choice, the one switch from runtime (D, H/G) to compiled instances, and
// the padding-row launch.
#include "cuda/attention/launch.h"

#include <algorithm>
#include <type_traits>

#include "core/check.h"
#include "core/plan.h"
#include "cuda/attention/heuristics.h"
#include "cuda/attention/instances.h"
#include "cuda/attention/tiles.h"
#include "cuda/common/check.h"

namespace step5::cuda {
namespace {

using detail::concat;
using detail::require;

// Zeroes rows [row_begin, row_end) of a bf16 [*, H, D] tensor, 8 values
// (16 bytes) per thread, grid-stride.
__global__ void zero_rows_kernel(uint16_t* out, int64_t row_stride, int64_t head_stride,
                                 int32_t num_heads, int32_t head_size, int64_t row_begin,
                                 int64_t row_end) {
  const int64_t per_row = int64_t{num_heads} * (head_size / 8);
  const int64_t total = (row_end - row_begin) * per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = row_begin + i / per_row;
    const int64_t rem = i % per_row;
    const int64_t head = rem / (head_size / 8);
    const int64_t d0 = (rem % (head_size / 8)) * 8;
    *reinterpret_cast<uint4*>(out + row * row_stride + head * head_stride + d0) =
        make_uint4(0, 0, 0, 0);
  }
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

int64_t max_pages_of(bool csa, int topk, int window) {
  return csa ? attn::csa_max_pages(topk) : attn::swa_max_pages(window);
}

// Split-KV partials (epilogue.cuh): acc and stats per (row, head, split).
size_t scratch_for(int64_t rows, int heads, int dim, int splits) {
  if (splits <= 1 || rows <= 0) return 0;
  const size_t floats = static_cast<size_t>(rows) * heads * splits * (dim + 2);
  return detail::align_up(floats * sizeof(float), detail::kWorkspaceAlign);
}
// One arrival counter per (row, group).
size_t counters_for(int64_t rows, int groups, int splits) {
  if (splits <= 1 || rows <= 0) return 0;
  return detail::align_up(static_cast<size_t>(rows) * groups * 4u, detail::kWorkspaceAlign);
}

void check_params(const PagedAttentionParams& p) {
  const ErrorCode bad = ErrorCode::invalid_argument;
  require(p.num_kv_heads > 0 && p.num_heads > 0 && p.num_heads % p.num_kv_heads == 0, bad,
          "paged attention: heads expected H > 0, G > 0, H % G == 0, got H = ", p.num_heads,
          ", G = ", p.num_kv_heads);
  require(p.block_size >= 8 && p.block_size % 8 == 0, bad,
          "paged attention: block_size expected a positive multiple of 8, got ", p.block_size);
  require(p.block_shift < 0 || (p.block_shift < 31 && (1 << p.block_shift) == p.block_size), bad,
          "paged attention: block_shift expected -1 or log2(block_size ", p.block_size, "), got ",
          p.block_shift);
  require(p.num_rows >= 0 && p.row_begin >= 0, bad,
          "paged attention: rows expected row_begin >= 0 and num_rows >= 0, got ", p.row_begin,
          ", ", p.num_rows);
  require(p.kv_dtype == DType::bf16 || p.kv_dtype == DType::fp8_e4m3, ErrorCode::unsupported,
          "paged attention: kv dtype expected bf16 or fp8_e4m3, got ", dtype_name(p.kv_dtype));
  require(p.query != nullptr && p.output != nullptr && p.kv != nullptr &&
              p.block_table != nullptr && p.rows.seq_lens != nullptr,
          bad, "paged attention: query, output, kv, block_table and seq_lens expected non-null");
  if (p.selected != nullptr) {
    require(p.topk > 0, bad, "paged attention: topk expected > 0 for CSA, got ", p.topk);
  } else {
    require(p.window > 0, bad, "paged attention: window expected > 0 for SWA, got ", p.window);
  }
  require(p.softmax_scale > 0.0f, bad, "paged attention: softmax scale expected > 0, got ",
          p.softmax_scale);
  if (p.write_kv) {
    // The K/V write of write_kv goes to the cache this launch reads, for
    // every row it computes (kv_write.h's layout is the attention's).
    const KvWriteParams& w = p.kv_write;
    require(w.cache == p.kv && w.block_stride == p.kv_block_stride &&
                w.head_stride == p.kv_head_stride && w.token_stride == p.kv_token_stride &&
                w.num_heads == p.num_kv_heads && w.head_size == p.head_size &&
                w.block_size == p.block_size && w.key != nullptr && w.value != nullptr &&
                w.slot_mapping != nullptr && p.row_list == nullptr && p.selected == nullptr &&
                w.num_tokens >= p.row_begin + p.num_rows,
            bad,
            "paged attention: write_kv expected an SWA launch over a range of rows, its own "
            "cache, heads, head size and block size, and a slot for every row, got a write of ",
            w.num_tokens, " rows for rows ", p.row_begin, "..", p.row_begin + p.num_rows);
  }
  // 16-byte cp.async of cache rows; 32-bit query fragments; 16-byte stores.
  require(aligned16(p.kv) && p.kv_block_stride % 16 == 0 && p.kv_head_stride % 16 == 0 &&
              p.kv_token_stride % 16 == 0,
          ErrorCode::unsupported,
          "paged attention: kv base and byte strides expected multiples of 16, got strides ",
          p.kv_block_stride, ", ", p.kv_head_stride, ", ", p.kv_token_stride);
  require(reinterpret_cast<uintptr_t>(p.query) % 4 == 0 && p.query_row_stride % 2 == 0 &&
              p.query_head_stride % 2 == 0,
          ErrorCode::unsupported,
          "paged attention: query expected 4-byte aligned with even element strides, got "
          "strides ",
          p.query_row_stride, ", ", p.query_head_stride);
  require(aligned16(p.output) && p.output_row_stride % 8 == 0 && p.output_head_stride % 8 == 0,
          ErrorCode::unsupported,
          "paged attention: output expected 16-byte aligned with element strides multiple of 8, "
          "got strides ",
          p.output_row_stride, ", ", p.output_head_stride);
}

// Heads per group stay run-time (any 1..16 fits the M tile); D becomes a
// compile-time parameter in with_head_size below, the one switch on it.
void require_supported(int head_size, int num_heads, int num_kv_heads) {
  const int hpg = num_heads / num_kv_heads;
  require(hpg >= 1 && hpg <= attn::mma_rows(), ErrorCode::unsupported,
          "paged attention: heads per group H/G expected 1..", attn::mma_rows(), ", got ", hpg,
          " (H = ", num_heads, ", G = ", num_kv_heads, ")");
  require(head_size == 64 || head_size == 128 || head_size == 192, ErrorCode::unsupported,
          "paged attention: head size D expected 64, 128 or 192, got ", head_size);
}

// f(std::integral_constant<int, D>) for a supported head size (the launch
// and the plan's tile-depth choice both go through here).
template <class F>
void with_head_size(int head_size, F&& f) {
  switch (head_size) {
    case 64: f(std::integral_constant<int, 64>{}); return;
    case 128: f(std::integral_constant<int, 128>{}); return;
    default: f(std::integral_constant<int, 192>{}); return;
  }
}

void dispatch(const PagedAttentionParams& p, int splits, cudaStream_t stream) {
  require_supported(p.head_size, p.num_heads, p.num_kv_heads);
  with_head_size(p.head_size,
                 [&](auto d) { attn::run_paged<decltype(d)::value>(p, splits, stream); });
}

}  // namespace

void require_paged_attention_supports(const LayerConfig& config) {
  require_supported(config.head_size, config.num_heads, config.num_kv_heads);
}

namespace {

// Dynamic shared memory of the tile for this layer, plus the static bound.
template <class T>
size_t tile_bytes(const LayerConfig& c) {
  const int64_t max_pages = max_pages_of(T::kIsCsa, c.topk, c.window);
  return T::smem_bytes(max_pages, attn::block_table_pages(max_pages)) + attn::static_smem_reserve();
}

template <int D, bool kFp8, bool kCsa>
int stages_for(const LayerConfig& c, size_t max_smem) {
  using Default = attn::Tile<D, kFp8, kCsa>;
  const size_t need = tile_bytes<Default>(c);
  if (need <= max_smem) return Default::kStages;
  size_t compact_need = 0;
  if constexpr (attn::has_compact_tile<D, kFp8, kCsa>()) {
    using Compact = attn::Tile<D, kFp8, kCsa, attn::attention_compact_stages(kFp8)>;
    compact_need = tile_bytes<Compact>(c);
    if (compact_need <= max_smem) return Compact::kStages;
  }
  detail::fail(ErrorCode::unsupported,
               concat("paged attention: shared memory per block expected >= ",
                      compact_need > 0 ? compact_need : need, " bytes for D = ", D,
                      kFp8 ? " fp8" : " bf16", kCsa ? " K = " : " W = ", kCsa ? c.topk : c.window,
                      ", got ", max_smem, " on this GPU"));
}

template <int D>
int stages_of(const LayerConfig& c, size_t max_smem) {
  const bool fp8 = c.kv_dtype == DType::fp8_e4m3;
  const bool csa = c.kind == LayerKind::csa;
  if (fp8)
    return csa ? stages_for<D, true, true>(c, max_smem) : stages_for<D, true, false>(c, max_smem);
  return csa ? stages_for<D, false, true>(c, max_smem) : stages_for<D, false, false>(c, max_smem);
}

}  // namespace

int paged_attention_stages(const LayerConfig& config, size_t max_smem) {
  require_supported(config.head_size, config.num_heads, config.num_kv_heads);
  int stages = 0;
  with_head_size(config.head_size,
                 [&](auto d) { stages = stages_of<decltype(d)::value>(config, max_smem); });
  return stages;
}

int paged_attention_splits(const LayerConfig& config, int64_t rows, int sm_count) {
  const bool csa = config.kind == LayerKind::csa;
  return attn::num_splits(rows, config.num_kv_heads, max_pages_of(csa, config.topk, config.window),
                          sm_count);
}

size_t paged_attention_counters_bytes(const LayerConfig& config, int64_t rows, int splits) {
  return counters_for(rows, config.num_kv_heads, splits);
}

size_t paged_attention_scratch_bytes(const LayerConfig& config, int64_t rows, int splits) {
  return scratch_for(rows, config.num_heads, config.head_size, splits);
}

PagedAttentionBytes paged_attention_max_bytes(const LayerConfig& config, int64_t max_rows,
                                              int sm_count) {
  // Splits (and so scratch) exist only while rows * G is under the CTA
  // target; past it every row count takes one split and no scratch.
  const int64_t G = config.num_kv_heads;
  const int64_t last = std::min(max_rows, (attn::target_ctas(sm_count) + G - 1) / G);
  PagedAttentionBytes most;
  for (int64_t rows = 1; rows <= last; ++rows) {
    const int splits = paged_attention_splits(config, rows, sm_count);
    most.scratch = std::max(most.scratch, paged_attention_scratch_bytes(config, rows, splits));
    most.counters = std::max(most.counters, paged_attention_counters_bytes(config, rows, splits));
  }
  return most;
}

void launch_paged_attention(const PagedAttentionParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.pad_row_end > p.pad_row_begin) {
    launch_zero_rows(p.output, p.output_row_stride, p.output_head_stride, p.num_heads, p.head_size,
                     p.pad_row_begin, p.pad_row_end, stream);
  }
  if (p.num_rows == 0) return;
  const int splits = p.num_splits;
  require(splits >= 1 && splits <= attn::max_splits(), ErrorCode::invalid_argument,
          "paged attention: num_splits expected 1..", attn::max_splits(), ", got ", splits);
  const size_t need = scratch_for(p.num_rows, p.num_heads, p.head_size, splits);
  require(need == 0 || (p.scratch != nullptr && p.scratch_bytes >= need && aligned16(p.scratch) &&
                        p.split_arrivals != nullptr),
          ErrorCode::invalid_argument, "paged attention: scratch expected >= ", need,
          " bytes, 16-byte aligned, and split arrival counters, got ", p.scratch_bytes,
          " bytes at ", p.scratch, ", counters at ", p.split_arrivals);
  require(p.num_rows * p.num_kv_heads * splits < (int64_t{1} << 31), ErrorCode::unsupported,
          "paged attention: rows * G * splits expected < 2^31 CTAs, got ",
          p.num_rows * p.num_kv_heads * splits);
  dispatch(p, splits, stream);
}

void launch_zero_rows(uint16_t* output, int64_t row_stride, int64_t head_stride, int32_t num_heads,
                      int32_t head_size, int64_t row_begin, int64_t row_end, cudaStream_t stream) {
  if (row_end <= row_begin) return;
  require(aligned16(output) && row_stride % 8 == 0 && head_stride % 8 == 0 && head_size % 8 == 0,
          ErrorCode::unsupported,
          "zero rows: output expected 16-byte aligned, strides and D multiples of 8");
  const int64_t vectors = (row_end - row_begin) * num_heads * (head_size / 8);
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((vectors + threads - 1) / threads, 4096);
  zero_rows_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      output, row_stride, head_stride, num_heads, head_size, row_begin, row_end);
  check_launch("zero_rows_kernel");
}

}  // namespace step5::cuda
