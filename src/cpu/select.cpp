// select_regions: all closed regions when C <= K, else the K best scores
// with ties to the lower region index (SPEC 4), exactly.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/plan.h"
#include "cpu/cache_access.h"
#include "cpu/kernels.h"

namespace step5::cpu {

size_t select_slab_bytes(int64_t max_closed) {
  SlabCursor cursor(nullptr);
  cursor.take<int32_t>(static_cast<size_t>(max_closed));
  return cursor.used();
}

namespace kernel {

void select_regions(const StepArgs& a, const Scratch& scratch, RowRange rows,
                    const TensorView& scores, const TensorView& selected) {
  const LayerConfig& c = a.config;
  const int G = c.num_kv_heads;
  const int K = c.topk;
  a.pool.parallel_for(rows.size() * G, [&](int64_t item, int thread) {
    const int64_t i = item / G;
    const auto g = static_cast<int>(item % G);
    const int32_t C = detail::closed_regions(a.rows.row_position[rows.begin + i]);
    int32_t* out = at<int32_t>(selected, i, g);
    if (C <= K) {
      for (int32_t k = 0; k < K; ++k) out[k] = k < C ? k : -1;
      return;
    }
    const float* score = at<const float>(scores, i, g);
    // Strict weak order: higher score first, NaN below everything, equal
    // scores (and NaNs) by ascending index.
    auto better = [score](int32_t x, int32_t y) {
      const float sx = score[x];
      const float sy = score[y];
      const bool nx = std::isnan(sx);
      const bool ny = std::isnan(sy);
      if (nx != ny) return ny;
      if (!nx && sx != sy) return sx > sy;
      return x < y;
    };
    auto* order = reinterpret_cast<int32_t*>(scratch.slab(thread));
    std::iota(order, order + C, 0);
    std::nth_element(order, order + K, order + C, better);
    std::sort(order, order + K);
    std::copy(order, order + K, out);
  });
}

}  // namespace kernel
}  // namespace step5::cpu
