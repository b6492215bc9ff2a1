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
// The same crossing for the sm_90a (wgmma) tile kernel, whose cost per
// union region is lower: at 8K (union 2 K) its CSA layer takes 2.21 ms
// against the row kernel's 5.3 ms; the first version of the kernel
// already beat the row kernel at 32K correlated (7.23 against 9.77 ms)
// and lost at 32K independent (union 7.1 K: 11.90 against 11.24 ms), and
// the kernel has since run 1.6x faster, so the limit takes 32K in
// (docs/benchmarks.md, sixth session, for the measured crossing).
constexpr double max_union_over_topk_wgmma() {
  return 9.0;
}

inline double expected_union(int64_t closed, int topk) {
  if (closed <= topk) return static_cast<double>(closed);
  const double c = static_cast<double>(closed);
  return c * (1.0 - std::pow(1.0 - static_cast<double>(topk) / c, tile_rows()));
}

inline bool csa_tiles_pay(int64_t closed, int topk, bool wgmma) {
  const double limit = wgmma ? max_union_over_topk_wgmma() : max_union_over_topk();
  return expected_union(closed, topk) <= limit * topk;
}

}  // namespace step5::cuda::tiled
