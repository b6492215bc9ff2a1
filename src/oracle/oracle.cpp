// The dense oracle of SPEC 3-5. Deliberately naive: explicit key sets, fp64
// scores and attention, a stable sort for selection. Only the storage
// rounding (bf16 / fp8 cache contents, the fp32 summary formula) is exact,
// because those values are what every backend reads.
#include "step5/testing/oracle.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "step5/numerics.h"

namespace step5::oracle {

namespace {

using detail::require;

size_t kv_row(const LayerConfig& c) {
  return static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.head_size);
}

float round_summary(const LayerConfig& c, float x) {
  return c.summary_dtype == DType::bf16 ? round_to_bf16(x) : round_to_fp8_e4m3(x);
}

// Separate multiply and add so the compiler cannot fuse them into an FMA
// whose single rounding would differ from the SPEC's fp32 formula.
[[gnu::noinline]] float mul(float a, float b) {
  return a * b;
}

// Dense softmax attention of every head; the heads of group g attend over
// the positions keys[g].
std::vector<double> attend(const LayerConfig& c, const History& history, const QueryRow& row,
                           const std::vector<std::vector<int64_t>>& keys) {
  const int G = c.num_kv_heads;
  const int per_group = c.heads_per_group();
  const auto ud = static_cast<size_t>(c.head_size);
  const double scale = static_cast<double>(c.softmax_scale());
  std::vector<double> out(static_cast<size_t>(c.num_heads) * ud, 0.0);
  for (int g = 0; g < G; ++g) {
    const auto& set = keys[static_cast<size_t>(g)];
    std::vector<double> k(set.size() * ud), v(set.size() * ud), logits(set.size());
    for (size_t u = 0; u < set.size(); ++u) {
      const size_t base = static_cast<size_t>(set[u]) * kv_row(c) + static_cast<size_t>(g) * ud;
      for (size_t d = 0; d < ud; ++d) {
        k[u * ud + d] = stored_kv(c, history.key[base + d], false);
        v[u * ud + d] = stored_kv(c, history.value[base + d], true);
      }
    }
    for (int hh = 0; hh < per_group; ++hh) {
      const auto h = static_cast<size_t>(g * per_group + hh);
      const float* q = row.query + h * ud;
      double max_logit = -INFINITY;
      for (size_t u = 0; u < set.size(); ++u) {
        double dot = 0.0;
        for (size_t d = 0; d < ud; ++d) dot += static_cast<double>(q[d]) * k[u * ud + d];
        logits[u] = scale * dot;
        max_logit = std::max(max_logit, logits[u]);
      }
      double den = 0.0;
      double* o = out.data() + h * ud;
      for (size_t u = 0; u < set.size(); ++u) {
        const double p = std::exp(logits[u] - max_logit);
        den += p;
        for (size_t d = 0; d < ud; ++d) o[d] += p * v[u * ud + d];
      }
      double factor = 1.0 / den;
      if (row.gate != nullptr) factor /= 1.0 + std::exp(-static_cast<double>(row.gate[h]));
      for (size_t d = 0; d < ud; ++d) o[d] *= factor;
    }
  }
  return out;
}

void check_position(const History& history, const QueryRow& row) {
  require(row.position >= 0 && row.position < history.length, ErrorCode::out_of_range,
          "oracle: row position expected 0..", history.length - 1, " (history length), got ",
          row.position);
}

std::vector<int64_t> range_keys(int64_t first, int64_t last) {
  std::vector<int64_t> keys(static_cast<size_t>(last - first + 1));
  std::iota(keys.begin(), keys.end(), first);
  return keys;
}

}  // namespace

void History::write(const LayerConfig& c, int64_t position, const float* key_row,
                    const float* value_row, const float* index_key_row, float z) {
  require(position >= 0 && position <= length, ErrorCode::out_of_range,
          "History::write: position expected 0..", length, " (append or rewrite), got ", position);
  const size_t row = kv_row(c);
  const auto di = static_cast<size_t>(c.index_dim);
  const bool csa = c.kind == LayerKind::csa;
  if (position == length) {
    ++length;
    key.resize(static_cast<size_t>(length) * row);
    value.resize(static_cast<size_t>(length) * row);
    if (csa) {
      index_key.resize(static_cast<size_t>(length) * di);
      index_z.resize(static_cast<size_t>(length));
    }
  }
  const auto p = static_cast<size_t>(position);
  std::copy(key_row, key_row + row, key.begin() + static_cast<std::ptrdiff_t>(p * row));
  std::copy(value_row, value_row + row, value.begin() + static_cast<std::ptrdiff_t>(p * row));
  if (csa) {
    require(index_key_row != nullptr, ErrorCode::invalid_argument,
            "History::write: index_key expected non-null for a CSA layer, got null");
    std::copy(index_key_row, index_key_row + di,
              index_key.begin() + static_cast<std::ptrdiff_t>(p * di));
    index_z[p] = z;
  }
}

void History::truncate(const LayerConfig& c, int64_t new_length) {
  require(new_length >= 0 && new_length <= length, ErrorCode::out_of_range,
          "History::truncate: length expected 0..", length, ", got ", new_length);
  length = new_length;
  const auto n = static_cast<size_t>(new_length);
  key.resize(n * kv_row(c));
  value.resize(n * kv_row(c));
  if (c.kind == LayerKind::csa) {
    index_key.resize(n * static_cast<size_t>(c.index_dim));
    index_z.resize(n);
  }
}

std::vector<float> summary(const LayerConfig& c, const History& history, int64_t region) {
  require(region >= 0 && (region + 1) * kRegionSize <= history.length, ErrorCode::out_of_range,
          "oracle::summary: region expected closed (0..", history.length / kRegionSize - 1,
          "), got ", region);
  const auto di = static_cast<size_t>(c.index_dim);
  const auto first = static_cast<size_t>(region * kRegionSize);
  float max_z = history.index_z[first];
  for (size_t i = 1; i < kRegionSize; ++i) max_z = std::max(max_z, history.index_z[first + i]);
  std::vector<float> num(di, 0.0f);
  float den = 0.0f;
  for (size_t i = 0; i < kRegionSize; ++i) {
    const float a = std::exp(history.index_z[first + i] - max_z);
    const float* k = history.index_key.data() + (first + i) * di;
    for (size_t d = 0; d < di; ++d) num[d] = num[d] + mul(a, k[d]);
    den = den + a;
  }
  for (size_t d = 0; d < di; ++d) num[d] = round_summary(c, num[d] / den);
  return num;
}

float stored_kv(const LayerConfig& c, float x, bool is_value) {
  if (c.kv_dtype == DType::bf16) return x;
  const float scale = is_value ? c.v_scale : c.k_scale;
  return round_to_fp8_e4m3(x / scale) * scale;
}

RowResult csa_row(const LayerConfig& c, const History& history, const QueryRow& row,
                  const std::vector<std::vector<int32_t>>* forced) {
  check_position(history, row);
  const int G = c.num_kv_heads, I = c.index_heads;
  const auto di = static_cast<size_t>(c.index_dim);
  const int64_t current = row.position / kRegionSize;
  const auto closed = static_cast<size_t>(current);
  std::vector<std::vector<float>> summaries(closed);
  for (size_t j = 0; j < closed; ++j) summaries[j] = summary(c, history, static_cast<int64_t>(j));

  RowResult result;
  result.scores.assign(static_cast<size_t>(G), std::vector<double>(closed, 0.0));
  result.selected.resize(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    auto& scores = result.scores[static_cast<size_t>(g)];
    for (size_t j = 0; j < closed; ++j) {
      double score = 0.0;
      for (int h = 0; h < I; ++h) {
        const size_t qh = static_cast<size_t>(g * I + h);
        const float* q = row.index_query + qh * di;
        double dot = 0.0;
        for (size_t d = 0; d < di; ++d) dot += static_cast<double>(q[d]) * summaries[j][d];
        score += static_cast<double>(row.index_weight[qh]) * std::max(dot, 0.0);
      }
      scores[j] = score;
    }
    std::vector<int32_t> order(closed);
    std::iota(order.begin(), order.end(), 0);
    // Stable: among equal scores the lower region stays first (SPEC 4). A
    // NaN score (from NaN inputs) ranks below every number, so the order
    // stays a strict weak order.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      const double sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
      if (std::isnan(sa) || std::isnan(sb)) return !std::isnan(sa) && std::isnan(sb);
      return sa > sb;
    });
    order.resize(std::min(closed, static_cast<size_t>(c.topk)));
    std::sort(order.begin(), order.end());
    result.selected[static_cast<size_t>(g)] = std::move(order);
  }
  if (forced != nullptr) {
    require(forced->size() == static_cast<size_t>(G), ErrorCode::invalid_argument,
            "oracle::csa_row: forced selection expected ", G, " groups, got ", forced->size());
    for (int g = 0; g < G; ++g) {
      auto& sel = result.selected[static_cast<size_t>(g)];
      sel.clear();
      for (int32_t j : (*forced)[static_cast<size_t>(g)]) {
        if (j >= 0) sel.push_back(j);
      }
    }
  }

  std::vector<std::vector<int64_t>> keys(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    auto& set = keys[static_cast<size_t>(g)];
    for (int32_t j : result.selected[static_cast<size_t>(g)]) {
      for (int64_t i = 0; i < kRegionSize; ++i) set.push_back(int64_t{j} * kRegionSize + i);
    }
    for (int64_t p = current * kRegionSize; p <= row.position; ++p) set.push_back(p);
  }
  result.output = attend(c, history, row, keys);
  return result;
}

RowResult swa_row(const LayerConfig& c, const History& history, const QueryRow& row) {
  check_position(history, row);
  const int64_t first = std::max<int64_t>(0, row.position - c.window + 1);
  RowResult result;
  result.output = attend(c, history, row,
                         std::vector<std::vector<int64_t>>(static_cast<size_t>(c.num_kv_heads),
                                                           range_keys(first, row.position)));
  return result;
}

RowResult dense_causal_row(const LayerConfig& c, const History& history, const QueryRow& row) {
  check_position(history, row);
  RowResult result;
  result.output = attend(c, history, row,
                         std::vector<std::vector<int64_t>>(static_cast<size_t>(c.num_kv_heads),
                                                           range_keys(0, row.position)));
  return result;
}

bool selection_acceptable(const std::vector<double>& scores, const std::vector<int32_t>& selected,
                          int topk, double tolerance) {
  const size_t closed = scores.size();
  if (selected.size() != std::min(closed, static_cast<size_t>(std::max(topk, 0)))) return false;
  std::vector<char> chosen(closed, 0);
  for (int32_t j : selected) {
    if (j < 0 || static_cast<size_t>(j) >= closed || chosen[static_cast<size_t>(j)]) return false;
    chosen[static_cast<size_t>(j)] = 1;
  }
  double largest = 0.0, min_selected = INFINITY, max_unselected = -INFINITY;
  for (size_t j = 0; j < closed; ++j) {
    largest = std::max(largest, std::fabs(scores[j]));
    if (chosen[j]) {
      min_selected = std::min(min_selected, scores[j]);
    } else {
      max_unselected = std::max(max_unselected, scores[j]);
    }
  }
  return min_selected >= max_unselected - tolerance * largest;
}

}  // namespace step5::oracle
