// Single operations of the cuda backend (indexer_scores, select_regions,
// sparse_attention, window_attention) as an engine would call them one by
// one: scores against the oracle, the rest against the forward they are
// stages of (same kernels, so the same bits).
#if defined(STEP5_HAVE_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "step5/numerics.h"
#include "step5/testing/device_memory.h"
#include "step5/testing/oracle.h"
#include "step5attn/check.h"

namespace step5::tool::check {

namespace {

constexpr Device kGpu = Device::cuda;

// The oracle's scores of row t, group g, for index queries `index_query`
// (bf16 bits [n, G, I, Di]).
std::vector<double> oracle_scores(const OpsState& s, const std::vector<uint16_t>& index_query,
                                  size_t t, int g) {
  const LayerConfig& c = s.ref->config();
  const auto gi = static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.index_heads);
  const auto di = static_cast<size_t>(c.index_dim);
  std::vector<float> iq(gi * di),
      q(static_cast<size_t>(c.num_heads) * static_cast<size_t>(c.head_size), 0.0f);
  for (size_t e = 0; e < gi * di; ++e) iq[e] = bf16_to_float(index_query[t * gi * di + e]);
  oracle::QueryRow row;
  row.position = s.row_position[t];
  row.query = q.data();
  row.index_query = iq.data();
  row.index_weight = s.index_weight_host.data() + t * gi;
  return oracle::csa_row(c, s.ref->history(s.row_request[t]), row).scores[static_cast<size_t>(g)];
}

// The same summaries re-laid with padded regions (region stride = row + 16
// bytes, as a caller's own cache may have): the indexer then copies one row
// at a time instead of one run of a block's regions, and its scores must
// come out bit for bit the same.
std::string check_padded_regions(const OpsState& s, const std::vector<float>& want, int64_t S) {
  const LayerConfig& c = s.ref->config();
  const SummaryCacheView& from = s.cache->summaries;
  const int64_t n = s.plan->num_tokens, G = c.num_kv_heads;
  const int64_t row = c.index_dim * static_cast<int64_t>(dtype_size(c.summary_dtype));
  const int64_t per_block = c.block_size / 8;
  SummaryCacheView padded = from;
  padded.region_stride = row + 16;
  padded.block_stride = per_block * padded.region_stride;
  sim::DeviceBuffer copy(kGpu, static_cast<size_t>(from.num_blocks * padded.block_stride));
  padded.data = copy.data();
  for (int64_t b = 0; b < from.num_blocks; ++b) {
    const cudaError_t err =
        cudaMemcpy2D(static_cast<char*>(copy.data()) + b * padded.block_stride,
                     static_cast<size_t>(padded.region_stride),
                     static_cast<const char*>(from.data) + b * from.block_stride,
                     static_cast<size_t>(from.region_stride), static_cast<size_t>(row),
                     static_cast<size_t>(per_block), cudaMemcpyDeviceToDevice);
    if (err != cudaSuccess) return concat("padded summary copy: ", cudaGetErrorString(err));
  }
  sim::DeviceBuffer scores(kGpu, static_cast<size_t>(n * G * S) * 4);
  s.cuda->indexer_scores(c, *s.desc, *s.plan, {0, n}, s.index_query, s.index_weight, padded,
                         TensorView::contiguous(scores.data(), DType::f32, {n, G, S}, kGpu),
                         nullptr);
  sim::synchronize(kGpu);
  const std::vector<float> got = scores.to_vector<float>(static_cast<size_t>(n * G * S));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return concat("indexer_scores with padded summary regions: score ", i, " got ", got[i],
                    ", packed regions gave ", want[i]);
    }
  }
  return "";
}

// Scores of `got` ([n, G, S]) against the oracle's for `index_query`:
// within 1e-4 of the row's largest score below C, -inf from C on. Each
// (row, group) that passes is then handed with the oracle's scores to
// `then(t, g, want)` (more checks on the same row; empty when they pass).
template <class Then>
std::string compare_scores(const OpsState& s, const std::vector<uint16_t>& index_query,
                           const std::vector<float>& got, int64_t S, const char* what,
                           Then&& then) {
  const int64_t n = s.plan->num_tokens, G = s.ref->config().num_kv_heads;
  for (size_t t = 0; t < static_cast<size_t>(n); ++t) {
    const int32_t C = s.row_position[t] / 8;
    for (int g = 0; g < G; ++g) {
      const std::vector<double> want = oracle_scores(s, index_query, t, g);
      const float* row = got.data() + (t * static_cast<size_t>(G) + static_cast<size_t>(g)) *
                                          static_cast<size_t>(S);
      double scale = 1e-6;
      for (double w : want) scale = std::max(scale, std::fabs(w));
      for (int32_t j = 0; j < S; ++j) {
        const bool ok = j < C ? std::fabs(row[j] - want[static_cast<size_t>(j)]) <= 1e-4 * scale
                              : std::isinf(row[j]) && row[j] < 0;
        if (!ok) {
          return concat(what, " row ", t, " group ", g, " region ", j, ": got ", row[j],
                        j < C ? concat(", oracle ", want[static_cast<size_t>(j)]) : ", want -inf");
        }
      }
      if (std::string e = then(t, g, want); !e.empty()) return e;
    }
  }
  return "";
}

// Index queries whose rows span more than f16's range (one element of every
// row scaled by 2^-60): the tensor-core indexer cannot stage them as exact
// f16 and must fall back to bf16 MMAs; the scores must still be the
// oracle's.
std::string check_wide_range_queries(const OpsState& s, int64_t S) {
  const LayerConfig& c = s.ref->config();
  const int64_t n = s.plan->num_tokens, G = c.num_kv_heads;
  const auto di = static_cast<size_t>(c.index_dim);
  std::vector<uint16_t> wide = s.index_query_host;
  for (size_t r = 0; r < wide.size() / di; ++r) {
    uint16_t& x = wide[r * di + r % di];
    x = float_to_bf16(bf16_to_float(x) * 0x1p-60f);
  }
  sim::DeviceBuffer query(kGpu, wide.size() * 2);
  const cudaError_t err =
      cudaMemcpy(query.data(), wide.data(), wide.size() * 2, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return concat("wide-range query copy: ", cudaGetErrorString(err));
  TensorView view = s.index_query;
  view.data = query.data();
  view.stride[0] = G * c.index_heads * c.index_dim;
  view.stride[1] = c.index_heads * c.index_dim;
  view.stride[2] = c.index_dim;
  view.stride[3] = 1;
  sim::DeviceBuffer scores(kGpu, static_cast<size_t>(n * G * S) * 4);
  s.cuda->indexer_scores(c, *s.desc, *s.plan, {0, n}, view, s.index_weight, s.cache->summaries,
                         TensorView::contiguous(scores.data(), DType::f32, {n, G, S}, kGpu),
                         nullptr);
  sim::synchronize(kGpu);
  return compare_scores(s, wide, scores.to_vector<float>(static_cast<size_t>(n * G * S)), S,
                        "indexer_scores with wide-range index queries",
                        [](size_t, int, const std::vector<double>&) { return std::string(); });
}

std::string check_csa_ops(const OpsState& s) {
  const LayerConfig& c = s.ref->config();
  const int64_t n = s.plan->num_tokens, G = c.num_kv_heads, K = c.topk;
  int32_t closed = 0;
  for (int32_t p : s.row_position) closed = std::max(closed, p / 8);
  const int64_t S = closed + 5;  // a tail past every row's C, to see the -inf fill
  sim::DeviceBuffer scores(kGpu, static_cast<size_t>(n * G * S) * 4);
  const TensorView scores_view = TensorView::contiguous(scores.data(), DType::f32, {n, G, S}, kGpu);
  s.cuda->indexer_scores(c, *s.desc, *s.plan, {0, n}, s.index_query, s.index_weight,
                         s.cache->summaries, scores_view, nullptr);
  sim::DeviceBuffer selected(kGpu, static_cast<size_t>(n * G * K) * 4);
  const TensorView selected_view =
      TensorView::contiguous(selected.data(), DType::i32, {n, G, K}, kGpu);
  s.cuda->select_regions(c, *s.desc, *s.plan, {0, n}, scores_view, selected_view, nullptr);
  sim::synchronize(kGpu);
  const std::vector<float> got = scores.to_vector<float>(static_cast<size_t>(n * G * S));
  if (std::string e = check_padded_regions(s, got, S); !e.empty()) return e;
  const std::vector<int32_t> sel = selected.to_vector<int32_t>(static_cast<size_t>(n * G * K));
  // The selection of each row against the oracle's scores, computed once
  // per row for both checks.
  auto check_selection = [&](size_t t, int g, const std::vector<double>& want) -> std::string {
    const int32_t C = s.row_position[t] / 8;
    const int32_t* entries =
        sel.data() + (t * static_cast<size_t>(G) + static_cast<size_t>(g)) * static_cast<size_t>(K);
    std::vector<int32_t> chosen;
    for (int64_t i = 0; i < K; ++i) {
      if (entries[i] >= 0) chosen.push_back(entries[i]);
      const bool ascending = i == 0 || entries[i] < 0 || entries[i] > entries[i - 1];
      if (!ascending || (entries[i] < 0 && i + 1 < K && entries[i + 1] >= 0)) {
        return concat("select_regions row ", t, " group ", g, ": not ascending, -1 padded");
      }
    }
    if (!oracle::selection_acceptable(want, chosen, static_cast<int>(K), 1e-4)) {
      return concat("select_regions row ", t, " group ", g, ": not a top-", K, " of ", C);
    }
    return "";
  };
  if (std::string e =
          compare_scores(s, s.index_query_host, got, S, "indexer_scores", check_selection);
      !e.empty()) {
    return e;
  }
  if (std::string e = check_wide_range_queries(s, S); !e.empty()) return e;
  if (s.forward == nullptr) return "";
  if (sel != s.forward->selected) return "select_regions differs from the forward's selection";
  const int64_t rows = s.plan->num_output_rows, H = c.num_heads, D = c.head_size;
  sim::DeviceBuffer out(kGpu, static_cast<size_t>(rows * H * D) * 2);
  s.cuda->sparse_attention(c, *s.desc, *s.plan, {0, n}, s.query, selected_view, s.gate, s.cache->kv,
                           TensorView::contiguous(out.data(), DType::bf16, {rows, H, D}, kGpu),
                           nullptr);
  sim::synchronize(kGpu);
  std::vector<uint16_t> attn = out.to_vector<uint16_t>(static_cast<size_t>(rows * H * D));
  attn.resize(static_cast<size_t>(n * H * D));
  return attn == s.forward->output ? "" : "sparse_attention differs from the forward's output";
}

std::string check_swa_ops(const OpsState& s) {
  const LayerConfig& c = s.ref->config();
  const int64_t n = s.plan->num_tokens, rows = s.plan->num_output_rows;
  const int64_t H = c.num_heads, D = c.head_size;
  sim::DeviceBuffer out(kGpu, static_cast<size_t>(rows * H * D) * 2);
  s.cuda->window_attention(c, *s.desc, *s.plan, s.query, s.gate, s.cache->kv,
                           TensorView::contiguous(out.data(), DType::bf16, {rows, H, D}, kGpu),
                           nullptr);
  sim::synchronize(kGpu);
  std::vector<uint16_t> attn = out.to_vector<uint16_t>(static_cast<size_t>(rows * H * D));
  attn.resize(static_cast<size_t>(n * H * D));
  return attn == s.forward->output ? "" : "window_attention differs from the forward's output";
}

}  // namespace

std::string check_single_ops(const OpsState& state) {
  return state.ref->config().kind == LayerKind::csa ? check_csa_ops(state) : check_swa_ops(state);
}

}  // namespace step5::tool::check
#endif
