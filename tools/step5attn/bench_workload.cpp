#include "step5attn/bench_workload.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "step5/tensor.h"

namespace step5::tool::bench {

std::string Shape::phase() const {
  if (query_len == 1) return "decode";
  return query_len <= 4 ? "verify" : "prefill";
}

StepHost make_step(const LayerConfig& c, const std::vector<int32_t>& seq_lens,
                   const std::vector<int32_t>& query_lens, int64_t pool_blocks,
                   std::mt19937_64& rng) {
  StepHost s;
  s.num_requests = static_cast<int32_t>(seq_lens.size());
  s.seq_lens = seq_lens;
  const int32_t longest = *std::max_element(seq_lens.begin(), seq_lens.end());
  s.max_blocks = (longest + c.block_size - 1) / c.block_size;
  std::vector<int32_t> perm(static_cast<size_t>(pool_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  s.block_table.resize(static_cast<size_t>(s.num_requests) * s.max_blocks);
  for (size_t i = 0; i < s.block_table.size(); ++i) {
    s.block_table[i] = perm[i % perm.size()];
  }
  s.query_start_loc.push_back(0);
  for (int32_t r = 0; r < s.num_requests; ++r) {
    s.ring_index.push_back(r);
    for (int32_t i = 0; i < query_lens[r]; ++i) {
      const int32_t pos = seq_lens[r] - query_lens[r] + i;
      const int64_t block = s.block_table[static_cast<size_t>(r) * s.max_blocks +
                                          static_cast<size_t>(pos / c.block_size)];
      s.slot_mapping.push_back(block * c.block_size + pos % c.block_size);
      s.row_request.push_back(r);
      s.row_position.push_back(pos);
    }
    s.query_start_loc.push_back(s.query_start_loc.back() + query_lens[r]);
  }
  s.num_tokens = s.query_start_loc.back();
  return s;
}

namespace {

// K distinct values of [0, c), ascending (Floyd's algorithm).
std::vector<int32_t> draw(int32_t c, int k, std::mt19937_64& rng) {
  std::unordered_set<int32_t> chosen;
  for (int32_t j = c - k; j < c; ++j) {
    const int32_t x = std::uniform_int_distribution<int32_t>(0, j)(rng);
    if (!chosen.insert(x).second) chosen.insert(j);
  }
  std::vector<int32_t> out(chosen.begin(), chosen.end());
  std::sort(out.begin(), out.end());
  return out;
}

// Replaces about 1/8 of `prev` with fresh regions of [0, c).
std::vector<int32_t> drift(const std::vector<int32_t>& prev, int32_t c, std::mt19937_64& rng) {
  std::unordered_set<int32_t> keep;
  for (int32_t x : prev) {
    if (x < c && rng() % 8 != 0) keep.insert(x);
  }
  while (keep.size() < prev.size()) {
    keep.insert(std::uniform_int_distribution<int32_t>(0, c - 1)(rng));
  }
  std::vector<int32_t> out(keep.begin(), keep.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<int32_t> make_selection(const LayerConfig& c, const StepHost& s, bool correlated,
                                    std::mt19937_64& rng) {
  const int G = c.num_kv_heads;
  const int K = c.topk;
  std::vector<int32_t> sel(static_cast<size_t>(s.num_tokens) * G * K, -1);
  std::vector<std::vector<int32_t>> prev(static_cast<size_t>(G));
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    const int32_t closed = s.row_position[t] / kRegionSize;
    const bool first_row = t == 0 || s.row_request[t - 1] != s.row_request[t];
    for (int g = 0; g < G; ++g) {
      std::vector<int32_t> pick;
      if (closed <= K) {
        pick.resize(static_cast<size_t>(closed));
        std::iota(pick.begin(), pick.end(), 0);
      } else if (correlated && !first_row) {
        pick = drift(prev[g], closed, rng);
      } else {
        pick = draw(closed, K, rng);
      }
      std::copy(pick.begin(), pick.end(), sel.begin() + (t * G + g) * K);
      prev[g] = std::move(pick);
    }
  }
  return sel;
}

double neighbour_jaccard(const LayerConfig& c, const StepHost& s, const std::vector<int32_t>& sel) {
  const int G = c.num_kv_heads;
  const int K = c.topk;
  double sum = 0;
  int64_t pairs = 0;
  for (int64_t t = 1; t < s.num_tokens; ++t) {
    if (s.row_request[t - 1] != s.row_request[t]) continue;
    for (int g = 0; g < G; ++g) {
      const int32_t* a = sel.data() + ((t - 1) * G + g) * K;
      const int32_t* b = sel.data() + (t * G + g) * K;
      std::unordered_set<int32_t> sa;
      for (int i = 0; i < K; ++i) {
        if (a[i] >= 0) sa.insert(a[i]);
      }
      int64_t both = 0, nb = 0;
      for (int i = 0; i < K; ++i) {
        if (b[i] < 0) continue;
        ++nb;
        both += sa.count(b[i]) ? 1 : 0;
      }
      const int64_t either = static_cast<int64_t>(sa.size()) + nb - both;
      sum += either > 0 ? static_cast<double>(both) / static_cast<double>(either) : 1.0;
      ++pairs;
    }
  }
  return pairs > 0 ? sum / static_cast<double>(pairs) : -1.0;
}

double tile_union_ratio(const LayerConfig& c, const std::vector<int32_t>& row_tiles,
                        const std::vector<int32_t>& sel) {
  const int G = c.num_kv_heads;
  const int K = c.topk;
  if (row_tiles.empty() || sel.empty()) return -1.0;
  const int32_t most = *std::max_element(sel.begin(), sel.end());
  // seen[r] == mark: region r is already in the current (tile, group)'s union.
  std::vector<uint32_t> seen(static_cast<size_t>(std::max(most, 0)) + 1, 0);
  uint32_t mark = 0;
  double sum = 0;
  int64_t tiles = 0;
  for (size_t i = 0; i + 1 < row_tiles.size(); i += 2) {
    const int64_t first = row_tiles[i], count = row_tiles[i + 1];
    for (int g = 0; g < G; ++g) {
      ++mark;
      int64_t in_union = 0, selected = 0;
      for (int64_t t = first; t < first + count; ++t) {
        const int32_t* row = sel.data() + (t * G + g) * K;
        for (int k = 0; k < K; ++k) {
          if (row[k] < 0) continue;
          ++selected;
          if (seen[static_cast<size_t>(row[k])] != mark) {
            seen[static_cast<size_t>(row[k])] = mark;
            ++in_union;
          }
        }
      }
      if (selected == 0) continue;
      sum += static_cast<double>(in_union) * static_cast<double>(count) /
             static_cast<double>(selected);
      ++tiles;
    }
  }
  return tiles > 0 ? sum / static_cast<double>(tiles) : -1.0;
}

int64_t max_launches_per_forward(const StepPlan& plan, LayerKind kind) {
  return kind == LayerKind::csa ? 1 + 3 * static_cast<int64_t>(plan.chunks.size()) : 2;
}

Counts attention_counts(const LayerConfig& c, const StepHost& s,
                        const std::vector<int32_t>* selected) {
  const double H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const double esize = static_cast<double>(dtype_size(c.kv_dtype));
  const int K = c.topk;
  Counts out;
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    const int32_t p = s.row_position[t];
    const int32_t cur = p / kRegionSize;
    for (int g = 0; g < c.num_kv_heads; ++g) {
      double keys = 0, pages = 0;
      if (c.kind == LayerKind::csa) {
        const int32_t* row = selected->data() + (t * c.num_kv_heads + g) * K;
        int64_t count = 0;
        for (int i = 0; i < K; ++i) count += (row[i] >= 0 && row[i] < cur) ? 1 : 0;
        keys = 8.0 * static_cast<double>(count) + (p - 8 * cur + 1);
        pages = static_cast<double>(count) + 1;
      } else {
        const int32_t lo = std::max(0, p - c.window + 1);
        keys = p - lo + 1;
        pages = cur - lo / kRegionSize + 1;
      }
      out.flops += (H / G) * keys * 4 * D;
      out.bytes += pages * 8 * 2 * D * esize;
    }
  }
  const double n = static_cast<double>(s.num_tokens);
  out.bytes += n * H * D * 2 * 2 + n * H * 2;
  if (c.kind == LayerKind::csa) out.bytes += n * G * K * 4;
  out.floor_bytes = out.bytes;
  return out;
}

Counts csa_full_attention_counts(const LayerConfig& c, const StepHost& s) {
  std::vector<int32_t> selected(static_cast<size_t>(s.num_tokens) * c.num_kv_heads * c.topk);
  for (size_t i = 0; i < selected.size(); ++i) selected[i] = static_cast<int32_t>(i % c.topk);
  // Any K distinct closed regions give the same counts.
  return attention_counts(c, s, &selected);
}

Counts kv_write_counts(const LayerConfig& c, const StepHost& s) {
  Counts out;
  out.bytes = static_cast<double>(s.num_tokens) * c.num_kv_heads * 2 * c.head_size *
              static_cast<double>(dtype_size(c.kv_dtype));
  out.floor_bytes = out.bytes;
  return out;
}

Counts csa_layer_extra(const LayerConfig& c, const StepHost& s) {
  const double G = c.num_kv_heads, D = c.head_size, Di = c.index_dim, I = c.index_heads;
  Counts out;
  const double n = static_cast<double>(s.num_tokens);
  out.bytes += n * G * 2 * D * static_cast<double>(dtype_size(c.kv_dtype));
  for (int32_t r = 0; r < s.num_requests; ++r) {
    const double closed = s.seq_lens[r] / kRegionSize;
    out.bytes += closed * Di * static_cast<double>(dtype_size(c.summary_dtype));
  }
  out.floor_bytes = out.bytes;
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    const double closed = s.row_position[t] / kRegionSize;
    if (closed > c.topk) out.bytes += 2 * G * closed * 4;
    out.flops += G * I * closed * 2 * Di;
  }
  return out;
}

}  // namespace step5::tool::bench
