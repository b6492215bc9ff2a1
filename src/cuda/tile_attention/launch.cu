// Host side of the tile attention family: which layers it serves, parameter
// checks, and the one switch from the runtime head size to the compiled
// instances.
#include <cstdint>

#include "core/check.h"
#include "cuda/tile_attention/geometry.h"
#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/instances.h"
#include "cuda/tile_attention/params.h"

namespace step5::cuda {
namespace {

using detail::require;

bool compiled_head_size(int d) {
  return d == 64 || d == 128 || d == 192;
}

size_t smem_bytes(int head_size, bool fp8) {
  switch (head_size) {
    case 64: return tiled::tile_smem_bytes<64>(fp8);
    case 128: return tiled::tile_smem_bytes<128>(fp8);
    default: return tiled::tile_smem_bytes<192>(fp8);
  }
}

size_t wgmma_smem_bytes(int head_size) {
  switch (head_size) {
    case 64: return tiled::tile_wgmma_smem_bytes<64>();
    case 128: return tiled::tile_wgmma_smem_bytes<128>();
    default: return tiled::tile_wgmma_smem_bytes<192>();
  }
}

}  // namespace

bool tile_attention_supports(const LayerConfig& config, size_t max_smem) {
  if (config.num_kv_heads <= 0 || config.num_heads % config.num_kv_heads != 0) return false;
  const int hpg = config.num_heads / config.num_kv_heads;
  // A warp holds 16 / hpg rows of hpg heads: hpg must divide 16, and the
  // CTA has hpg warps.
  const bool heads_ok = hpg <= tiled::max_heads_per_group() && 16 % hpg == 0;
  if (!heads_ok || !compiled_head_size(config.head_size)) return false;
  return smem_bytes(config.head_size, config.kv_dtype == DType::fp8_e4m3) <= max_smem;
}

// A subset of the layers the mma.sync kernel serves.
bool tile_attention_wgmma_supports(const LayerConfig& config, size_t max_smem) {
  return tile_attention_supports(config, max_smem) &&
         config.num_heads / config.num_kv_heads == tiled::hopper_heads_per_group() &&
         wgmma_smem_bytes(config.head_size) <= max_smem;
}

void launch_tile_attention(const TileAttentionParams& p, cudaStream_t stream) {
  const PagedAttentionParams& a = p.attn;
  const ErrorCode bad = ErrorCode::invalid_argument;
  require(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0, bad,
          "tile attention: heads expected H % G == 0 with G > 0, got H = ", a.num_heads,
          ", G = ", a.num_kv_heads);
  const int hpg = a.num_heads / a.num_kv_heads;
  require(hpg <= tiled::max_heads_per_group() && 16 % hpg == 0 && compiled_head_size(a.head_size),
          ErrorCode::unsupported,
          "tile attention: expected H/G in {1, 2, 4, 8} and D in {64, 128, 192}, got H/G = ", hpg,
          ", D = ", a.head_size);
  require(a.kv_dtype == DType::bf16 || a.kv_dtype == DType::fp8_e4m3, ErrorCode::unsupported,
          "tile attention: kv dtype expected bf16 or fp8_e4m3, got ", dtype_name(a.kv_dtype));
  require(a.block_size >= 8 && a.block_size % 8 == 0, bad,
          "tile attention: block_size expected a positive multiple of 8, got ", a.block_size);
  require(a.query != nullptr && a.output != nullptr && a.kv != nullptr &&
              a.block_table != nullptr && a.rows.seq_lens != nullptr,
          bad, "tile attention: query, output, kv, block_table and seq_lens expected non-null");
  // CSA rows attend from key 0: the Hopper page source marks only their own
  // regions as cut (hopper_csa_list.cuh).
  require(a.selected != nullptr ? a.topk > 0 && a.window == 0 : a.window > 0, bad,
          "tile attention: expected topk > 0 and window 0 (CSA) or window > 0 (SWA), got topk = ",
          a.topk, ", window = ", a.window, a.selected != nullptr ? " (CSA)" : " (SWA)");
  require(!a.write_kv, bad,
          "tile attention: the K/V write rides only on the row kernel's launch "
          "(PagedAttentionParams::write_kv expected false)");
  require(p.num_tiles >= 0 && (p.num_tiles == 0 || p.tiles != nullptr), bad,
          "tile attention: expected a tile table for ", p.num_tiles, " tiles");
  require(int64_t{p.num_tiles} * a.num_kv_heads < (int64_t{1} << 31), ErrorCode::unsupported,
          "tile attention: tiles * G expected < 2^31 CTAs, got ",
          int64_t{p.num_tiles} * a.num_kv_heads);
  require(!p.wgmma || hpg == tiled::hopper_heads_per_group(), ErrorCode::unsupported,
          "tile attention (wgmma): expected H/G = 8, got ", hpg);
  require(!p.wgmma || a.selected != nullptr || p.ctas > 0, bad,
          "tile attention (wgmma, SWA): expected a persistent grid of ctas > 0, got ", p.ctas);
  require(p.tile_runs == nullptr || (p.wgmma && a.selected != nullptr), bad,
          "tile attention: per-tile decisions (tile_runs) expected only for CSA tiles on the "
          "wgmma kernel");
  if (p.num_tiles == 0) return;
  switch (a.head_size) {
    case 64: tiled::run_tiles<64>(p, stream); break;
    case 128: tiled::run_tiles<128>(p, stream); break;
    default: tiled::run_tiles<192>(p, stream); break;
  }
}

}  // namespace step5::cuda
