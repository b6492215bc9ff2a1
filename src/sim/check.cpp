// check_step: a backend's step against the oracle (SPEC 8).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/check.h"
#include "step5/numerics.h"
#include "step5/testing/sim.h"

namespace step5::sim {

namespace {

using detail::concat;

std::vector<float> widen(const uint16_t* bits, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// One unit in the last place of the storage dtype at |x|; 0 for a value
// that is not finite (ilogb of NaN or infinity is no exponent).
double storage_ulp(DType dtype, double x) {
  const double a = std::fabs(x);
  if (!std::isfinite(a)) return 0.0;
  if (dtype == DType::fp8_e4m3) {
    // 3 mantissa bits; subnormals are spaced 2^-9 apart.
    return a < 0x1p-6 ? 0x1p-9 : std::ldexp(1.0, std::ilogb(a) - 3);
  }
  return a < 0x1p-126 ? 0x1p-133 : std::ldexp(1.0, std::ilogb(a) - 7);
}

std::string list(const std::vector<int32_t>& v) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << ']';
  return s.str();
}

}  // namespace

bool parse_selection(const int32_t* entries, int topk, std::vector<int32_t>& out,
                     std::string& why) {
  out.clear();
  bool padding = false;
  for (int i = 0; i < topk; ++i) {
    const int32_t j = entries[i];
    if (j == -1) {
      padding = true;
      continue;
    }
    if (padding || j < 0 || (!out.empty() && j <= out.back())) {
      why = concat("entry ", i, " = ", j, " breaks 'ascending region ids, then -1 padding'");
      return false;
    }
    out.push_back(j);
  }
  return true;
}

std::string check_row_selection(const LayerConfig& config, const oracle::RowResult& ref,
                                const int32_t* selected, double score_tolerance,
                                std::vector<std::vector<int32_t>>& got, bool& differs) {
  const int G = config.num_kv_heads, K = config.topk;
  got.assign(static_cast<size_t>(G), {});
  differs = false;
  for (int g = 0; g < G; ++g) {
    const auto gi = static_cast<size_t>(g);
    std::vector<int32_t>& sel = got[gi];
    const std::vector<int32_t>& want = ref.selected[gi];
    std::string why;
    if (parse_selection(selected + gi * static_cast<size_t>(K), K, sel, why) && sel != want &&
        !oracle::selection_acceptable(ref.scores[gi], sel, K, score_tolerance)) {
      why = concat("selected ", list(sel), " is not a top-", K, " of ", ref.scores[gi].size(),
                   " closed regions (oracle ", list(want), ")");
    }
    if (!why.empty()) return concat("group ", g, ": ", why);
    differs = differs || sel != want;
  }
  return "";
}

Tolerance default_tolerance(const LayerConfig& config) {
  Tolerance t;
  if (config.kv_dtype == DType::fp8_e4m3) {
    // The oracle uses the exact dequantized values; a fast fp8 path folds
    // k_scale into the softmax scale and v_scale into the output and feeds
    // fp8 values to bf16/fp8 matrix products, which adds a few more roundings
    // of intermediates at bf16 precision than the bf16 path has.
    t.rel_l2 = 1.2e-2;
    t.max_abs = 4e-2;
  }
  return t;
}

CheckResult check_step(const LayerSession& session, const StepInput& in, const StepOutput& out,
                       const Tolerance& tol, bool exact_summaries) {
  const LayerConfig& c = session.config();
  const bool csa = c.kind == LayerKind::csa;
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, K = c.topk;
  const auto hd = static_cast<size_t>(H) * static_cast<size_t>(D);
  const auto gi = static_cast<size_t>(G) * static_cast<size_t>(c.index_heads);
  const auto di = static_cast<size_t>(c.index_dim);
  const auto n = static_cast<size_t>(in.num_tokens());
  CheckResult result;
  auto fail = [&](std::string message) {
    if (result.ok) result.message = std::move(message);
    result.ok = false;
  };
  if (out.output.size() != n * hd) {
    fail(concat("output: expected ", n * hd, " elements, got ", out.output.size()));
    return result;
  }
  if (!out.padding_zero) fail(concat("padding rows (", out.padding_rows, "): expected all +0"));

  double err2 = 0, ref2 = 0, worst_row_rel = -1;
  std::string worst_row;
  for (size_t r = 0; r < in.request.size(); ++r) {
    const oracle::History& history = session.history(in.request[r]);
    const int32_t begin = in.query_start_loc[r], end = in.query_start_loc[r + 1];
    for (int32_t t = begin; t < end; ++t) {
      const auto row = static_cast<size_t>(t);
      const std::vector<float> q = widen(in.query.data() + row * hd, hd);
      std::vector<float> gate, iq;
      oracle::QueryRow query;
      query.position = in.seq_lens[r] - (end - begin) + (t - begin);
      query.query = q.data();
      if (!in.gate.empty()) {
        gate = widen(in.gate.data() + row * static_cast<size_t>(H), static_cast<size_t>(H));
        query.gate = gate.data();
      }
      oracle::RowResult ref;
      if (csa) {
        iq = widen(in.index_query.data() + row * gi * di, gi * di);
        query.index_query = iq.data();
        query.index_weight = in.index_weight.data() + row * gi;
        ref = oracle::csa_row(c, history, query);
        if (out.selected.size() < n * static_cast<size_t>(G * K)) {
          fail(concat("row ", t, " (request ", in.request[r], ", position ", query.position,
                      "): selected output is missing"));
          return result;
        }
        std::vector<std::vector<int32_t>> got;
        bool differs = false;
        const std::string why =
            check_row_selection(c, ref, out.selected.data() + row * static_cast<size_t>(G * K),
                                tol.score, got, differs);
        if (!why.empty()) {
          fail(concat("row ", t, " (request ", in.request[r], ", position ", query.position, ") ",
                      why));
          return result;
        }
        if (differs) {
          ++result.selection_differs;
          ref = oracle::csa_row(c, history, query, &got);
        }
      } else {
        ref = oracle::swa_row(c, history, query);
      }
      double row_err2 = 0, row_ref2 = 0;
      for (size_t e = 0; e < hd; ++e) {
        const double got = bf16_to_float(out.output[row * hd + e]);
        const double want = ref.output[e];
        const double diff = std::fabs(got - want);
        // A value that is not finite never passes, on either side (a NaN
        // or infinity in the oracle comes from the inputs).
        const bool finite = std::isfinite(got) && std::isfinite(want);
        if (!finite || diff > tol.max_abs) {
          fail(concat(
              "output row ", t, " (request ", in.request[r], ", position ", query.position,
              ") head ", e / static_cast<size_t>(D), " element ", e % static_cast<size_t>(D),
              ": got ", got, ", oracle ", want,
              finite ? concat(" (max_abs ", tol.max_abs, ")") : std::string(" (not finite)")));
        }
        if (finite) result.max_abs = std::max(result.max_abs, diff);
        row_err2 += (got - want) * (got - want);
        row_ref2 += want * want;
      }
      err2 += row_err2;
      ref2 += row_ref2;
      const double row_rel = std::sqrt(row_err2 / std::max(row_ref2, 1e-300));
      if (row_rel > worst_row_rel) {
        worst_row_rel = row_rel;
        worst_row = concat("row ", t, " (request ", in.request[r], ", position ", query.position,
                           ") rel L2 ", row_rel);
      }
    }
  }
  result.rel_l2 = n == 0 ? 0.0 : std::sqrt(err2 / std::max(ref2, 1e-300));
  if (std::isnan(result.rel_l2) || result.rel_l2 > tol.rel_l2) {
    fail(concat("output rel L2 ", result.rel_l2, " expected <= ", tol.rel_l2, "; worst ",
                worst_row));
  }
  if (!csa) return result;

  if (out.closed.size() != in.request.size()) {
    fail(concat("closed: expected ", in.request.size(), " entries, got ", out.closed.size()));
    return result;
  }
  for (size_t r = 0; r < in.request.size(); ++r) {
    const int32_t want_closed = in.seq_lens[r] / kRegionSize;
    if (out.closed[r] != want_closed) {
      fail(concat("closed[", r, "] (request ", in.request[r], "): expected ", want_closed, ", got ",
                  out.closed[r]));
      return result;
    }
    const oracle::History& history = session.history(in.request[r]);
    for (int32_t j = 0; j < want_closed; ++j) {
      const std::vector<float> want = oracle::summary(c, history, j);
      const float* got = out.summary.data() +
                         (r * static_cast<size_t>(out.max_closed) + static_cast<size_t>(j)) * di;
      for (size_t d = 0; d < di; ++d) {
        // Bitwise equal and finite: a NaN or infinite summary never passes.
        const bool same = float_bits(got[d]) == float_bits(want[d]) && std::isfinite(got[d]);
        const double slack =
            storage_ulp(c.summary_dtype, std::max(std::fabs(got[d]), std::fabs(want[d])));
        const bool close =
            std::isfinite(got[d]) && std::fabs(static_cast<double>(got[d]) - want[d]) <= slack;
        if (!(exact_summaries ? same : (same || close))) {
          fail(concat("summary of request ", in.request[r], " region ", j, " element ", d, ": got ",
                      got[d], ", oracle ", want[d],
                      exact_summaries ? " (exact)" : " (one storage ulp)"));
          return result;
        }
      }
    }
  }
  return result;
}

}  // namespace step5::sim
