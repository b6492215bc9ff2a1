// The SPEC 10 replayer: one session, histories first, then every step.
#include <algorithm>

#include "core/check.h"
#include "step5/testing/case_file.h"

namespace step5 {

CaseOutputs replay_case(Backend& backend, const Case& c, const ReplayOptions& options) {
  validate_case(c);
  const double need = replay_memory_bytes(c, options.check);
  const double limit = replay_memory_limit(c, options);
  if (need > limit) {
    detail::fail(ErrorCode::invalid_argument,
                 detail::concat("replay: the case needs about ", need / (1 << 20),
                                " MiB (cache, rings, outputs", options.check ? ", oracle" : "",
                                "), expected at most ", limit / (1 << 20), " MiB (",
                                options.max_memory_bytes > 0
                                    ? std::string("max_memory_bytes")
                                    : detail::concat(options.memory_base_bytes >> 20, " MiB + ",
                                                     options.memory_per_case_byte, " x the case's ",
                                                     case_bytes(c), " bytes"),
                                "; the step5attn replay option --max-memory raises it)"));
  }
  sim::SessionOptions session_options;
  session_options.max_requests = std::max<int32_t>(1, c.num_requests());
  session_options.max_context = std::max<int64_t>(1, c.max_context());
  sim::LayerSession session(backend, c.config, session_options);

  const bool csa = c.config.kind == LayerKind::csa;
  const int64_t kv_row = int64_t{c.config.num_kv_heads} * c.config.head_size;
  int64_t row = 0;
  for (int32_t r = 0; r < c.num_requests(); ++r) {
    const int32_t len = c.context_lens[static_cast<size_t>(r)];
    if (len > 0) {
      const auto kv = static_cast<size_t>(row * kv_row);
      const auto index = static_cast<size_t>(row * c.config.index_dim);
      session.write_history(r, len, c.context_key.data() + kv, c.context_value.data() + kv,
                            csa ? c.context_index_key.data() + index : nullptr,
                            csa ? c.context_index_z.data() + row : nullptr);
    }
    row += len;
  }

  const sim::Tolerance tolerance =
      options.has_tolerance ? options.tolerance : sim::default_tolerance(c.config);
  // The cpu backend implements the SPEC's fixed-order summary formula, so
  // its summaries must match the oracle bit for bit; other backends get one
  // storage ulp.
  const bool exact_summaries = backend.kind() == BackendKind::cpu;
  CaseOutputs outputs;
  outputs.steps.reserve(c.steps.size());
  for (size_t s = 0; s < c.steps.size(); ++s) {
    outputs.steps.push_back(session.run(c.steps[s]));
    const sim::CheckResult* check = nullptr;
    if (options.check) {
      outputs.checks.push_back(
          sim::check_step(session, c.steps[s], outputs.steps.back(), tolerance, exact_summaries));
      check = &outputs.checks.back();
    }
    if (options.on_step) options.on_step(s, outputs.steps.back(), check);
  }
  return outputs;
}

}  // namespace step5
