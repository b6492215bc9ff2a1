// When the tile attention kernel pays off for CSA rows (SWA windows of
// neighbouring rows overlap almost entirely, so SWA always takes it).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/tile_attention/geometry.h"

namespace step5::cuda::tiled {

// A tile walks the union of its 16 rows' selected regions, and its cost
// follows the union: on the H200 (D = 192, H/G = 8, K = 512, one 2048-row
// chunk) ~4.4 us per union region and tile wave, against a row kernel
// that costs about the same for every context (8.4 ms at 8K, 10.4 ms at
// 32K). With independent selections of K among C regions the union of 16
// rows is C (1 - (1 - K/C)^16): 1,024 = 2 K at 8K (tiles 4.75 ms, the row
// kernel 8.4 ms) and 3,613 = 7 K at 32K (tiles 14.9 ms, rows 10.4 ms). So
// tiles are taken while the expected union stays within 3 K, which is
// where the two measured costs cross. Correlated selections shrink the
// union, so this errs towards the row kernel at long contexts.
constexpr double max_union_over_topk() {
  return 3.0;
}
// The same crossing for the sm_90a (wgmma) tile kernel, in union regions
// per row and K: a tile's cost per union region is lower there, and the
// row kernel's cost depends on the KV dtype and, since its bf16 rows are
// staged unpadded (fortieth session), on whether the context's
// pages stay in L2. H100, 2,048-row chunks, D = 192, H/G = 8, K = 512
// (docs/benchmarks.md, fortieth session): the bf16 tile layer costs
// ~1.0-1.1 ms per unit of union ratio (6.68 ms at 6.7 K, 14.07 ms at
// 12.7 K), the bf16 row layer 7.1-7.5 ms up to 32K and 11.0 ms at 128K,
// so they cross near 7.5 K at 32K and 9.9 K at 128K; 9 K sits between
// (a tile at 32K with a union of 9 K loses on the tile kernel as much as
// one at 128K with 8 K would on the rows: 20-30 %). fp8 (twenty-fifth session):
// tile layer ~0.92 ms per unit, row kernel ~4.7 ms whatever the union:
// 4.7 K. PlanOptions::tile_union_crossover overrides these.
constexpr double tile_union_crossover_wgmma(bool fp8) {
  return fp8 ? 4.7 : 9.0;
}

// Regions a per-tile choice counts in its shared-memory bitmap (one bit a
// region, 48 KB of static shared memory): contexts up to 3M tokens.
// Longer score rows keep the plan's static rule.
constexpr int tile_choice_max_regions() {
  return 12032 * 32;
}

inline double expected_union(int64_t closed, int topk) {
  if (closed <= topk) return static_cast<double>(closed);
  const double c = static_cast<double>(closed);
  return c * (1.0 - std::pow(1.0 - static_cast<double>(topk) / c, tile_rows()));
}

// How a CSA layer's planned tiles run. The plan knows only the context: a
// tile's cost follows the union of its rows' selections, which the
// selection decides on the device.
enum class CsaTiles : uint8_t {
  rows,      // every row to the row kernel
  tiles,     // every planned tile to the tile kernel
  per_tile,  // each tile decided on the device from its rows' union
};

// `crossover`: union regions per row and K up to which a tile beats its
// rows on the row kernel. Tiles outright while even independent
// selections stay under it; past it each tile is decided on the device
// (wgmma kernel only, whose crossovers were measured, and score rows that
// fit the choice's bitmap); else the limit of max_union_over_topk().
inline CsaTiles csa_tiles(int64_t closed, int topk, bool wgmma, double crossover,
                          int64_t score_columns) {
  const double limit = wgmma ? crossover : max_union_over_topk();
  if (expected_union(closed, topk) <= limit * topk) return CsaTiles::tiles;
  if (wgmma && score_columns <= tile_choice_max_regions()) return CsaTiles::per_tile;
  return CsaTiles::rows;
}

}  // namespace step5::cuda::tiled
