#include <algorithm>
#include <cmath>
#include <iostream>

#include "step5/numerics.h"
#include "step5/testing/oracle.h"
#include "step5attn/check.h"

namespace step5::tool::check {

namespace {

double storage_ulp(DType dtype, double x) {
  const double a = std::fabs(x);
  if (dtype == DType::fp8_e4m3) return a < 0x1p-6 ? 0x1p-9 : std::ldexp(1.0, std::ilogb(a) - 3);
  return a < 0x1p-126 ? 0x1p-133 : std::ldexp(1.0, std::ilogb(a) - 7);
}

std::vector<float> widen(const uint16_t* bits, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// Oracle scores of (row t, group g), for judging a differing selection.
std::vector<double> oracle_scores(const sim::LayerSession& session, const sim::StepInput& in,
                                  size_t r, int32_t t, int g) {
  const LayerConfig& c = session.config();
  const auto hd = static_cast<size_t>(c.num_heads) * static_cast<size_t>(c.head_size);
  const auto gi = static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.index_heads);
  const auto di = static_cast<size_t>(c.index_dim);
  const auto row = static_cast<size_t>(t);
  const std::vector<float> q = widen(in.query.data() + row * hd, hd);
  const std::vector<float> iq = widen(in.index_query.data() + row * gi * di, gi * di);
  oracle::QueryRow query;
  const int32_t qlen = in.query_start_loc[r + 1] - in.query_start_loc[r];
  query.position = in.seq_lens[r] - qlen + (t - in.query_start_loc[r]);
  query.query = q.data();
  query.index_query = iq.data();
  query.index_weight = in.index_weight.data() + row * gi;
  return oracle::csa_row(c, session.history(in.request[r]), query).scores[static_cast<size_t>(g)];
}

std::vector<int32_t> valid(const int32_t* entries, int topk) {
  std::vector<int32_t> out;
  for (int i = 0; i < topk; ++i) {
    if (entries[i] >= 0) out.push_back(entries[i]);
  }
  return out;
}

// Selections: "" when identical; "tie" when every difference is an
// acceptable near-tie; otherwise the reason.
std::string compare_selections(const sim::LayerSession& session, const sim::StepInput& in,
                               const sim::StepOutput& got, const sim::StepOutput& want,
                               const sim::Tolerance& tol) {
  const LayerConfig& c = session.config();
  const auto gk = static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.topk);
  if (got.selected.size() != want.selected.size()) {
    return concat("selected: ", got.selected.size(), " entries, cpu ", want.selected.size());
  }
  bool ties = false;
  for (size_t r = 0; r + 1 < in.query_start_loc.size(); ++r) {
    for (int32_t t = in.query_start_loc[r]; t < in.query_start_loc[r + 1]; ++t) {
      for (int g = 0; g < c.num_kv_heads; ++g) {
        const size_t at = static_cast<size_t>(t) * gk + static_cast<size_t>(g * c.topk);
        if (std::equal(got.selected.begin() + static_cast<std::ptrdiff_t>(at),
                       got.selected.begin() +
                           static_cast<std::ptrdiff_t>(at + static_cast<size_t>(c.topk)),
                       want.selected.begin() + static_cast<std::ptrdiff_t>(at))) {
          continue;
        }
        const std::vector<double> scores = oracle_scores(session, in, r, t, g);
        const std::vector<int32_t> sel = valid(got.selected.data() + at, c.topk);
        if (!oracle::selection_acceptable(scores, sel, c.topk, tol.score)) {
          return concat("selection of row ", t, " group ", g,
                        " differs from cpu and is not an "
                        "acceptable near-tie");
        }
        ties = true;
      }
    }
  }
  return ties ? "tie" : "";
}

std::string compare_summaries(const LayerConfig& c, const sim::StepOutput& got,
                              const sim::StepOutput& want) {
  if (got.closed != want.closed) return "closed region counts differ from cpu";
  if (got.summary.size() != want.summary.size()) return "summary sizes differ from cpu";
  for (size_t i = 0; i < got.summary.size(); ++i) {
    const double a = got.summary[i], b = want.summary[i];
    const double slack = storage_ulp(c.summary_dtype, std::max(std::fabs(a), std::fabs(b)));
    if (!(std::fabs(a - b) <= slack)) {
      return concat("summary element ", i, ": cuda ", a, ", cpu ", b, " (more than one ulp)");
    }
  }
  return "";
}

}  // namespace

HistoryRows random_history(const LayerConfig& c, std::mt19937_64& rng, int32_t length) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<uint16_t>& v, size_t count) {
    v.resize(count);
    for (auto& x : v) x = float_to_bf16(normal(rng));
  };
  HistoryRows h;
  const auto len = static_cast<size_t>(length);
  const auto gd = static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.head_size);
  fill(h.key, len * gd);
  fill(h.value, len * gd);
  if (c.kind == LayerKind::csa) {
    fill(h.index_key, len * static_cast<size_t>(c.index_dim));
    h.index_z.resize(len);
    for (auto& z : h.index_z) z = normal(rng);
  }
  return h;
}

void Tally::fail(const std::string& name, const std::string& why) {
  ++failed;
  std::cout << "FAIL " << name << ": " << why << "\n";
}

std::string compare_step(const sim::LayerSession& session, const sim::StepInput& in,
                         const sim::StepOutput& got, const sim::StepOutput& want,
                         const sim::Tolerance& tol) {
  const LayerConfig& c = session.config();
  if (!got.padding_zero) return concat("padding rows (", got.padding_rows, ") not all +0");
  if (got.output.size() != want.output.size()) {
    return concat("output: ", got.output.size(), " elements, cpu ", want.output.size());
  }
  if (c.kind == LayerKind::csa) {
    const std::string summaries = compare_summaries(c, got, want);
    if (!summaries.empty()) return summaries;
    const std::string selection = compare_selections(session, in, got, want, tol);
    if (selection == "tie") {
      // Different (acceptable) selections attend to different keys, so
      // judge the output against the oracle with the cuda selection.
      const sim::CheckResult oracle = sim::check_step(session, in, got, tol, false);
      return oracle.ok ? "" : concat("near-tie selection, oracle check: ", oracle.message);
    }
    if (!selection.empty()) return selection;
  }
  double err2 = 0, ref2 = 0, max_abs = 0;
  for (size_t i = 0; i < got.output.size(); ++i) {
    const double a = bf16_to_float(got.output[i]), b = bf16_to_float(want.output[i]);
    if (std::isnan(a) || std::isnan(b)) return concat("output element ", i, " is NaN");
    err2 += (a - b) * (a - b);
    ref2 += b * b;
    max_abs = std::max(max_abs, std::fabs(a - b));
  }
  const double rel = got.output.empty() ? 0.0 : std::sqrt(err2 / std::max(ref2, 1e-300));
  if (rel > tol.rel_l2 || max_abs > tol.max_abs) {
    return concat("output vs cpu: rel L2 ", rel, " (<= ", tol.rel_l2, "), max abs ", max_abs,
                  " (<= ", tol.max_abs, ")");
  }
  return "";
}

}  // namespace step5::tool::check
