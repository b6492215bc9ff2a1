// Internals of `step5attn check`: GPU-vs-CPU comparisons shared by the
// session cases (check.cpp) and the CUDA-graph cases (check_graph.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/sim.h"

namespace step5::tool::check {

// A failure message from its pieces, as an ostream prints them: integers
// in decimal (int8_t / uint8_t too), floating point as %g, bool as 1 / 0.
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  auto piece = [&out](const auto& arg) {
    using T = std::decay_t<decltype(arg)>;
    if constexpr (std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char>) {
      out << static_cast<int>(arg);
    } else {
      out << arg;
    }
  };
  (piece(args), ...);
  return out.str();
}

// Counts cases and prints one line per failure.
struct Tally {
  int passed = 0;
  int failed = 0;
  void pass() { ++passed; }
  void fail(const std::string& name, const std::string& why);
};

// Compares one step of the cuda session with the cpu session's same step:
// output (rel L2 / max abs at `tol`), selections (identical, else each
// differing (row, group) must be an acceptable near-tie on oracle scores,
// and then the output is checked against the oracle with the cuda
// selection), summaries within one storage ulp, padding rows zero. Returns
// an empty string when they agree, else the first difference.
std::string compare_step(const sim::LayerSession& cuda_session, const sim::StepInput& input,
                         const sim::StepOutput& got, const sim::StepOutput& want,
                         const sim::Tolerance& tol);

// Random history rows of one request (bf16 bits; z f32), as a prefill would
// write them: key/value [len, G, D], index_key [len, Di], index_z [len].
struct HistoryRows {
  std::vector<uint16_t> key, value, index_key;
  std::vector<float> index_z;
};
HistoryRows random_history(const LayerConfig& config, std::mt19937_64& rng, int32_t length);

// The single operations on the state a checked forward left behind: the
// step's rows and device inputs, and what that forward produced.
struct OpsState {
  Backend* cuda = nullptr;
  const sim::LayerSession* ref = nullptr;  // cpu session holding the same histories
  const StepDesc* desc = nullptr;
  const StepPlan* plan = nullptr;
  const LayerCache* cache = nullptr;                  // the cuda cache views
  std::vector<int32_t> row_request;                   // per step row: session request id
  std::vector<int32_t> row_position;                  // per step row
  TensorView query, gate, index_query, index_weight;  // device, by step row
  std::vector<uint16_t> index_query_host;             // [n, G, I, Di] bf16 bits (CSA)
  std::vector<float> index_weight_host;               // [n, G, I] (CSA)
  const sim::StepOutput* forward = nullptr;           // null: compare scores / selections with
                                                      // the oracle only
};

// indexer_scores against the oracle (and -inf past C), then select_regions,
// sparse_attention / window_attention against the forward's own results.
// Empty when they agree, else the first difference.
std::string check_single_ops(const OpsState& state);

// Graph-captured decode of a CSA and an SWA layer, replayed on new inputs.
void run_graph_cases(Backend& cpu, Backend& cuda, Tally& tally);
// The same, replayed with fewer live requests than captured (vLLM pads the
// rest as requests of length 0).
void run_graph_padding_cases(Backend& cpu, Backend& cuda, Tally& tally);

// The engine-facing API (issue 7): upper-bound lengths, padding requests,
// forward flags, write_kv from slots, the BLNHC cache and the workspace
// bound, each on the cuda backend against the cpu reference.
struct ApiCase {
  std::string name;
  int tier = 2;  // 0: --tiny, 1: --quick, 2: full
  void (*run)(Backend& cpu, Backend& cuda, Tally& tally) = nullptr;
};
std::vector<ApiCase> api_cases();

// Device guards: decode steps planned from valid host copies whose device
// block table, seq_lens and slot_mapping are then corrupted, as a graph
// replay may see them (check_guards.cpp).
void run_guard_cases(Backend& cuda, Tally& tally);

}  // namespace step5::tool::check
