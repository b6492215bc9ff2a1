// An engine in miniature around one layer: owns that layer's cache on a
// backend's device, allocates blocks (in shuffled order, so paging is
// exercised), keeps every request's tokens in an oracle::History, and runs
// steps through plan + prepare_step + forward. The demo, the replayer, the
// tests and the GPU check all drive backends through it.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/oracle.h"

namespace step5::sim {

// One step's host inputs, flattened request by request (SPEC 10 names).
// bf16 tensors hold raw bf16 bits.
struct StepInput {
  std::vector<int32_t> request;          // [Rs] distinct request ids
  std::vector<int32_t> query_start_loc;  // [Rs+1]
  std::vector<int32_t> seq_lens;         // [Rs] length after the step
  std::vector<uint16_t> query;           // [n, H, D]
  std::vector<uint16_t> key;             // [n, G, D]
  std::vector<uint16_t> value;           // [n, G, D]
  std::vector<uint16_t> index_query;     // [n, G, I, Di] (CSA)
  std::vector<float> index_weight;       // [n, G, I] (CSA)
  std::vector<uint16_t> index_key;       // [n, Di] (CSA)
  std::vector<float> index_z;            // [n] (CSA)
  std::vector<uint16_t> gate;            // [n, H] or empty (no gate)

  int64_t num_tokens() const { return query_start_loc.empty() ? 0 : query_start_loc.back(); }
};

// What a step produced (SPEC 10 output names).
struct StepOutput {
  std::vector<uint16_t> output;   // [n, H, D] bf16 bits
  std::vector<int32_t> selected;  // [n, G, K] (CSA), ascending, -1 padded
  std::vector<int32_t> closed;    // [Rs] closed regions after the step (CSA)
  int32_t max_closed = 0;         // dim 1 of `summary`
  std::vector<float> summary;     // [Rs, max_closed, Di] dequantized (CSA)
  double seconds = 0;             // wall time of plan + forward
  StepKind kind = StepKind::empty;
  int64_t padding_rows = 0;  // output rows past n the step asked for
  bool padding_zero = true;  // every padding row is as the forward must leave it: +0, or
                             // still the poison under ForwardFlags::skip_padding_zero
};

struct SessionOptions {
  int max_requests = 8;
  int64_t max_context = 4096;  // tokens per request the cache can hold
  uint64_t seed = 1;           // block allocation order
  int64_t padding_rows = 0;    // extra output rows per step (graph padding)

  // Engine behaviours of the API, exercised on every step:
  // - the planner sees seq_lens + slack as upper bounds
  //   (StepDesc::seq_lens_upper_bound), the forward the exact lengths;
  int32_t seq_lens_slack = 0;
  // - requests without rows appended to every step (vLLM's CUDA-graph
  //   padding): seq_len 0, ring entry 0, a block table row of zeros;
  int32_t padding_requests = 0;
  // - forward flags; with skip_kv_write the session first writes K/V with
  //   write_kv(slot_mapping only), with skip_summary_update it first runs
  //   update_summaries, as an engine that owns those ops would.
  ForwardFlags flags = ForwardFlags::none;
  // - PlanOptions::max_score_bytes when > 0: small values cut a step's rows
  //   into many scoring chunks (chunk boundaries inside prefill requests).
  size_t max_score_bytes = 0;
  // - PlanOptions::tile_attention (always: the tile kernel on every layer
  //   it serves, whatever the heuristic would choose).
  TileAttention tile_attention = TileAttention::automatic;
  // - PlanOptions::tile_union_crossover (low values have the cuda backend
  //   decide CSA tiles one by one on the device, some each way).
  double tile_union_crossover = 0.0;
};

// Bytes a LayerSession with these options allocates for its cache and
// rings, computed without allocating (a double: options a caller has not
// checked may describe more than 2^63 bytes).
double session_memory_bytes(const LayerConfig& config, const SessionOptions& options);

class LayerSession {
 public:
  LayerSession(Backend& backend, const LayerConfig& config, const SessionOptions& options);
  ~LayerSession();
  LayerSession(const LayerSession&) = delete;
  LayerSession& operator=(const LayerSession&) = delete;

  const LayerConfig& config() const;
  // Writes `length` history tokens of `request` at positions 0.. through
  // the backend's write_kv and update_summaries (no attention), as a
  // prefill would. Rows are bf16 bits: key/value [length, G, D], index_key
  // [length, Di], index_z [length] (CSA only).
  void write_history(int32_t request, int64_t length, const uint16_t* key, const uint16_t* value,
                     const uint16_t* index_key, const float* index_z);
  // Plans and runs one step; the histories are updated with its tokens.
  StepOutput run(const StepInput& input);
  const oracle::History& history(int32_t request) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// ---- checking against the oracle ---------------------------------------

struct Tolerance {
  double rel_l2 = 8e-3;   // ||out - ref|| / ||ref|| over the whole step
  double max_abs = 3e-2;  // max |out - ref|, on O(1)-scaled outputs
  double score = 1e-4;    // selection near-tie slack, relative
};
Tolerance default_tolerance(const LayerConfig& config);

struct CheckResult {
  bool ok = true;
  double rel_l2 = 0;
  double max_abs = 0;
  int64_t selection_differs = 0;  // rows whose (acceptable) selection differs
  std::string message;            // first failure, empty when ok
};

// Compares a step's output with the oracle over `session`'s histories
// (after the step). Accepts near-tie selection differences and then checks
// the attention with the backend's selection; checks summaries and closed
// counts exactly when `exact_summaries`, else within one storage ulp.
CheckResult check_step(const LayerSession& session, const StepInput& input,
                       const StepOutput& output, const Tolerance& tolerance, bool exact_summaries);

// One (row, group) of a backend's selection: ascending region ids, then -1
// padding, into `out`. False (with `why`) when malformed.
bool parse_selection(const int32_t* entries, int topk, std::vector<int32_t>& out, std::string& why);

// A backend's selection for one CSA row, every group ([G][K] at `selected`),
// against the oracle's row `ref`: each group must parse and be the oracle's
// selection or a top-K by the oracle's scores within `score_tolerance`.
// `got` receives the parsed selections and `differs` whether any group's
// differs from the oracle's (the row's output is then compared with the
// oracle run on `got`). Returns "" or what is wrong, naming the group.
std::string check_row_selection(const LayerConfig& config, const oracle::RowResult& ref,
                                const int32_t* selected, double score_tolerance,
                                std::vector<std::vector<int32_t>>& got, bool& differs);

// ---- workloads ----------------------------------------------------------

// Random bf16-representable inputs for `num_tokens[r]` new tokens of each
// request, which already holds `start[r]` tokens (start may be below what it
// holds: rejected drafts are rewritten). `correlated` makes index queries
// drift slowly from token to token, as in a real model.
StepInput random_step(const LayerConfig& config, std::mt19937_64& rng,
                      const std::vector<int32_t>& requests, const std::vector<int32_t>& start,
                      const std::vector<int32_t>& num_tokens, bool gate, bool correlated = false);

// A serving run: requests with long prompts prefilled in chunks, then
// decode steps (k = 0) or MTP verify steps with random acceptance.
struct ScenarioOptions {
  int requests = 3;
  int min_prompt = 200;
  int max_prompt = 900;
  int chunk = 160;       // prefill chunk budget per step (tokens)
  int decode_steps = 6;  // steps after every prompt is prefilled
  bool gate = true;
  uint64_t seed = 7;
};
struct ScenarioStep {
  StepInput input;
  std::string label;  // "prefill", "mixed", "decode", "verify"
};
// Steps are produced lazily: acceptance of verify drafts is drawn as the
// scenario advances, so each next() reflects the rewrites it implies.
class Scenario {
 public:
  Scenario(const LayerConfig& config, const ScenarioOptions& options);
  ~Scenario();
  bool done() const;
  ScenarioStep next();
  int64_t max_context() const;  // longest request the scenario can reach

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace step5::sim
