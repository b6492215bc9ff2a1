// The semantic rules of a case (SPEC 10), shared by load_case and by
// callers that build cases in memory.
#include <set>

#include "case/case_internal.h"
#include "core/check.h"
#include "step5/testing/case_file.h"

namespace step5 {

using case_detail::step_name;
using detail::concat;
using detail::require;

namespace {

constexpr ErrorCode kBad = ErrorCode::invalid_argument;

template <class T>
void require_size(const std::vector<T>& v, int64_t expected, const std::string& what) {
  require(static_cast<int64_t>(v.size()) == expected, kBad, what, ": expected ", expected,
          " elements, got ", v.size());
}

void validate_step(const Case& c, size_t s, std::vector<int64_t>& held) {
  const LayerConfig& cfg = c.config;
  const sim::StepInput& in = c.steps[s];
  const auto rs = static_cast<int64_t>(in.request.size());
  require_size(in.query_start_loc, rs + 1, step_name(s, "query_start_loc"));
  require(in.query_start_loc[0] == 0, kBad, step_name(s, "query_start_loc"),
          "[0]: expected 0, got ", in.query_start_loc[0]);
  require_size(in.seq_lens, rs, step_name(s, "seq_lens"));
  std::set<int32_t> seen;
  for (int64_t i = 0; i < rs; ++i) {
    const auto u = static_cast<size_t>(i);
    const int32_t r = in.request[u];
    require(r >= 0 && r < c.num_requests(), kBad, step_name(s, "request"), "[", i,
            "]: expected a request id in [0, ", c.num_requests(), "), got ", r);
    require(seen.insert(r).second, kBad, step_name(s, "request"), "[", i,
            "]: expected distinct request ids, got ", r, " twice");
    const int32_t qlen = in.query_start_loc[u + 1] - in.query_start_loc[u];
    require(qlen >= 0, kBad, step_name(s, "query_start_loc"), "[", i + 1,
            "]: expected >= ", in.query_start_loc[u], " (non-decreasing), got ",
            in.query_start_loc[u + 1]);
    require(in.seq_lens[u] >= qlen, kBad, step_name(s, "seq_lens"), "[", i,
            "]: expected >= the request's query length ", qlen, ", got ", in.seq_lens[u]);
    const int64_t start = in.seq_lens[u] - qlen;
    const auto ru = static_cast<size_t>(r);
    require(start <= held[ru], kBad, step_name(s, "seq_lens"), "[", i, "]: request ", r,
            " starts at position ", start, " (seq_lens ", in.seq_lens[u], " - query length ", qlen,
            "), expected <= the ", held[ru], " tokens it holds");
    held[ru] = in.seq_lens[u];
  }
  const int64_t n = in.num_tokens();
  const int64_t H = cfg.num_heads, G = cfg.num_kv_heads, D = cfg.head_size;
  require_size(in.query, n * H * D, step_name(s, "query"));
  require_size(in.key, n * G * D, step_name(s, "key"));
  require_size(in.value, n * G * D, step_name(s, "value"));
  if (cfg.kind == LayerKind::csa) {
    const int64_t I = cfg.index_heads, Di = cfg.index_dim;
    require_size(in.index_query, n * G * I * Di, step_name(s, "index_query"));
    require_size(in.index_weight, n * G * I, step_name(s, "index_weight"));
    require_size(in.index_key, n * Di, step_name(s, "index_key"));
    require_size(in.index_z, n, step_name(s, "index_z"));
  }
  if (!in.gate.empty()) require_size(in.gate, n * H, step_name(s, "gate"));
}

}  // namespace

void validate_case(const Case& c) {
  validate_config(c.config);
  std::vector<int64_t> held(c.context_lens.size());
  for (size_t r = 0; r < c.context_lens.size(); ++r) {
    require(c.context_lens[r] >= 0, kBad, "context.lens[", r, "]: expected >= 0, got ",
            c.context_lens[r]);
    held[r] = c.context_lens[r];
  }
  const int64_t rows = c.context_rows();
  const int64_t G = c.config.num_kv_heads, D = c.config.head_size;
  require_size(c.context_key, rows * G * D, "context.key");
  require_size(c.context_value, rows * G * D, "context.value");
  if (c.config.kind == LayerKind::csa) {
    require_size(c.context_index_key, rows * c.config.index_dim, "context.index_key");
    require_size(c.context_index_z, rows, "context.index_z");
  }
  for (size_t s = 0; s < c.steps.size(); ++s) validate_step(c, s, held);
}

}  // namespace step5
