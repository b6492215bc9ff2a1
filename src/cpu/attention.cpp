// sparse_attention and window_attention (SPEC 5): one task per (row, KV
// group) gathers the row's key positions, then attends all heads of the
// group over them, so each K/V row is dequantized once per group.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/cache_access.h"
#include "cpu/kernels.h"

namespace step5::cpu {

namespace {

struct AttentionScratch {
  int32_t* keys;  // [max_keys] key positions
  float* logits;  // [hpg, max_keys]; exp(logit - max) after the softmax pass
  float* query;   // [hpg, D]
  float* acc;     // [hpg, D]
  float* row;     // [D] one dequantized K or V row
  float* sums;    // [hpg] softmax denominators

  static AttentionScratch carve(SlabCursor& cursor, const LayerConfig& c, int64_t max_keys) {
    const auto hpg = static_cast<size_t>(c.heads_per_group());
    const auto D = static_cast<size_t>(c.head_size);
    const auto keys = static_cast<size_t>(max_keys);
    AttentionScratch w{};
    w.keys = cursor.take<int32_t>(keys);
    w.logits = cursor.take<float>(hpg * keys);
    w.query = cursor.take<float>(hpg * D);
    w.acc = cursor.take<float>(hpg * D);
    w.row = cursor.take<float>(D);
    w.sums = cursor.take<float>(hpg);
    return w;
  }
};

// Attention of the heads of group g of row t over w.keys[0, count):
// logits scale * q.k, max-subtracted softmax, sum of p_u v_u, all fp32,
// times sigmoid(gate), rounded once to bf16.
void attend(const StepArgs& a, const AttentionScratch& w, int64_t t, int g, int64_t count,
            const TensorView& query, const TensorView& gate, const KVCacheView& kv,
            const TensorView& output) {
  const LayerConfig& c = a.config;
  const int D = c.head_size;
  const int hpg = c.heads_per_group();
  const int32_t r = a.rows.row_request[t];
  const float scale = c.softmax_scale();
  const size_t value_offset = static_cast<size_t>(D) * dtype_size(kv.dtype);
  auto kv_of = [&](int64_t position) {
    return kv_row(kv, block_of(a.step, r, position, c.block_size), g, position % c.block_size);
  };

  for (int i = 0; i < hpg; ++i) {
    const uint16_t* q = at<const uint16_t>(query, t, g * hpg + i);
    for (int d = 0; d < D; ++d) w.query[i * D + d] = bf16_to_float(q[d]);
  }
  for (int64_t u = 0; u < count; ++u) {
    load_row(kv.dtype, kv_of(w.keys[u]), c.k_scale, D, w.row);
    for (int i = 0; i < hpg; ++i) w.logits[i * count + u] = scale * dot(w.query + i * D, w.row, D);
  }
  for (int i = 0; i < hpg; ++i) {
    float* logit = w.logits + i * count;
    const float max_logit = *std::max_element(logit, logit + count);
    float sum = 0.0f;
    for (int64_t u = 0; u < count; ++u) {
      logit[u] = std::exp(logit[u] - max_logit);
      sum += logit[u];
    }
    w.sums[i] = sum;
  }
  std::fill(w.acc, w.acc + hpg * D, 0.0f);
  for (int64_t u = 0; u < count; ++u) {
    load_row(kv.dtype, kv_of(w.keys[u]) + value_offset, c.v_scale, D, w.row);
    for (int i = 0; i < hpg; ++i) {
      const float p = w.logits[i * count + u];
      float* acc = w.acc + i * D;
      for (int d = 0; d < D; ++d) acc[d] += p * w.row[d];
    }
  }
  for (int i = 0; i < hpg; ++i) {
    const int h = g * hpg + i;
    float sigmoid = 1.0f;
    if (gate.present())
      sigmoid = 1.0f / (1.0f + std::exp(-bf16_to_float(*at<const uint16_t>(gate, t, h))));
    uint16_t* out = at<uint16_t>(output, t, h);
    for (int d = 0; d < D; ++d) out[d] = float_to_bf16(w.acc[i * D + d] / w.sums[i] * sigmoid);
  }
}

// Most keys any row of `plan` can have in a layer: never more than its
// position + 1 (a replayed uniform step may grow to the context capacity).
int64_t max_keys(const LayerConfig& c, const StepPlan& plan) {
  const int64_t bound =
      c.kind == LayerKind::csa ? int64_t{kRegionSize} * c.topk + kRegionSize : int64_t{c.window};
  return std::max<int64_t>(1, std::min<int64_t>(bound, plan.context_capacity));
}

// Padding rows (requests without rows at run time) come out as zeros, or
// are left to the caller.
bool padding_row(const StepArgs& a, int64_t t, int g, const TensorView& output) {
  if (a.rows.row_request[t] >= 0) return false;
  if (a.zero_padding_rows) {
    const int hpg = a.config.heads_per_group();
    const size_t bytes = static_cast<size_t>(a.config.head_size) * sizeof(uint16_t);
    for (int i = 0; i < hpg; ++i) std::memset(at<uint16_t>(output, t, g * hpg + i), 0, bytes);
  }
  return true;
}

}  // namespace

size_t attention_slab_bytes(const LayerConfig& config, int64_t keys) {
  SlabCursor cursor(nullptr);
  AttentionScratch::carve(cursor, config, keys);
  return cursor.used();
}

size_t scratch_slab_bytes(const StepPlan& plan) {
  size_t bytes = 0;
  for (const LayerConfig& c : plan.layers) {
    bytes = std::max(bytes, attention_slab_bytes(c, max_keys(c, plan)));
    if (c.kind == LayerKind::csa) {
      bytes = std::max({bytes, indexer_slab_bytes(c),
                        select_slab_bytes(std::max(plan.max_closed, plan.context_capacity / 8))});
    }
  }
  return bytes;
}

namespace kernel {

void sparse_attention(const StepArgs& a, const Scratch& scratch, RowRange rows,
                      const TensorView& query, const TensorView& selected, const TensorView& gate,
                      const KVCacheView& kv, const TensorView& output) {
  const LayerConfig& c = a.config;
  const int G = c.num_kv_heads;
  const int64_t keys = max_keys(c, a.plan);
  a.pool.parallel_for(rows.size() * G, [&](int64_t item, int thread) {
    const int64_t i = item / G;
    const auto g = static_cast<int>(item % G);
    const int64_t t = rows.begin + i;
    if (padding_row(a, t, g, output)) return;
    const int32_t p = a.rows.row_position[t];
    SlabCursor cursor(scratch.slab(thread));
    const AttentionScratch w = AttentionScratch::carve(cursor, c, keys);
    // Selected regions in the given order, then the current region up to p.
    int64_t count = 0;
    const int32_t* regions = at<const int32_t>(selected, i, g);
    for (int k = 0; k < c.topk; ++k) {
      if (regions[k] < 0) continue;
      for (int o = 0; o < kRegionSize; ++o) w.keys[count++] = regions[k] * kRegionSize + o;
    }
    for (int32_t q = p / kRegionSize * kRegionSize; q <= p; ++q) w.keys[count++] = q;
    attend(a, w, t, g, count, query, gate, kv, output);
  });
}

void window_attention(const StepArgs& a, const Scratch& scratch, const TensorView& query,
                      const TensorView& gate, const KVCacheView& kv, const TensorView& output) {
  const LayerConfig& c = a.config;
  const int G = c.num_kv_heads;
  const int64_t keys = max_keys(c, a.plan);
  a.pool.parallel_for(a.plan.num_tokens * G, [&](int64_t item, int thread) {
    const int64_t t = item / G;
    const auto g = static_cast<int>(item % G);
    if (padding_row(a, t, g, output)) return;
    const int32_t p = a.rows.row_position[t];
    SlabCursor cursor(scratch.slab(thread));
    const AttentionScratch w = AttentionScratch::carve(cursor, c, keys);
    int64_t count = 0;
    for (int32_t q = std::max(0, p - c.window + 1); q <= p; ++q) w.keys[count++] = q;
    attend(a, w, t, g, count, query, gate, kv, output);
  });
}

}  // namespace kernel
}  // namespace step5::cpu
