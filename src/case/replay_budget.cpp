// What a replay allocates, estimated from the case alone, so the replayer
// can refuse a case (a malformed one, or one far larger than it looks)
// before allocating any of it.
#include <algorithm>

#include "step5/testing/case_file.h"

namespace step5 {

namespace {

template <class T>
double bytes_of(const std::vector<T>& v) {
  return static_cast<double>(v.size()) * sizeof(T);
}

}  // namespace

double case_bytes(const Case& c) {
  double bytes = bytes_of(c.context_lens) + bytes_of(c.context_key) + bytes_of(c.context_value) +
                 bytes_of(c.context_index_key) + bytes_of(c.context_index_z);
  for (const sim::StepInput& in : c.steps) {
    bytes += bytes_of(in.request) + bytes_of(in.query_start_loc) + bytes_of(in.seq_lens) +
             bytes_of(in.query) + bytes_of(in.key) + bytes_of(in.value) + bytes_of(in.index_query) +
             bytes_of(in.index_weight) + bytes_of(in.index_key) + bytes_of(in.index_z) +
             bytes_of(in.gate);
  }
  return bytes;
}

double replay_memory_bytes(const Case& c, bool check) {
  const LayerConfig& cfg = c.config;
  const bool csa = cfg.kind == LayerKind::csa;
  const double H = cfg.num_heads, G = cfg.num_kv_heads, D = cfg.head_size;
  const double Di = cfg.index_dim, K = cfg.topk;
  sim::SessionOptions session;
  session.max_requests = std::max<int32_t>(1, c.num_requests());
  session.max_context = std::max<int64_t>(1, c.max_context());
  double total = sim::session_memory_bytes(cfg, session);

  // Each request's longest length: what the oracle's history holds.
  std::vector<double> longest(c.context_lens.begin(), c.context_lens.end());
  double largest_step = 0;
  for (const sim::StepInput& in : c.steps) {
    const auto n = static_cast<double>(in.num_tokens());
    double max_seq = 0;
    for (size_t r = 0; r < in.request.size() && r < in.seq_lens.size(); ++r) {
      max_seq = std::max<double>(max_seq, in.seq_lens[r]);
      const auto id = static_cast<size_t>(in.request[r]);
      if (id < longest.size()) longest[id] = std::max<double>(longest[id], in.seq_lens[r]);
    }
    const auto rs = static_cast<double>(in.request.size());
    // Retained: output [n, H, D] bf16; CSA: selected [n, G, K] i32, closed
    // [Rs] and summaries [Rs, max closed, Di] f32.
    double kept = n * H * D * 2;
    if (csa) kept += n * G * K * 4 + rs * 4 + rs * (max_seq / kRegionSize) * Di * 4;
    total += kept;
    // Transient: the device output and selected buffers and their host
    // copies, and the CSA scores buffer (bounded by the plan's chunking).
    double step = n * H * D * 2 * 2;
    if (csa) {
      const double scores = n * G * (max_seq / kRegionSize) * 4;
      step +=
          n * G * K * 4 * 2 + std::min(scores, static_cast<double>(PlanOptions{}.max_score_bytes));
    }
    largest_step = std::max(largest_step, step);
  }
  total += largest_step;
  if (check) {
    // oracle::History: fp32 key and value per KV head, index key and z.
    double tokens = 0;
    for (double len : longest) tokens += len;
    total += tokens * (G * D * 2 + (csa ? Di + 1 : 0)) * 4;
  }
  return total;
}

double replay_memory_limit(const Case& c, const ReplayOptions& options) {
  if (options.max_memory_bytes > 0) return static_cast<double>(options.max_memory_bytes);
  return static_cast<double>(options.memory_base_bytes) +
         static_cast<double>(options.memory_per_case_byte) * case_bytes(c);
}

}  // namespace step5
