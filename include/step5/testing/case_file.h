// Replay cases (SPEC 10, `step5-case/1`): one safetensors file holding a
// layer's configuration, each request's history and a sequence of steps,
// independent of any cache layout. Engines capture steps into cases; the
// replayer runs them on any backend, and their outputs compare backends.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/config.h"
#include "step5/testing/sim.h"

namespace step5 {

// The `format` metadata value this library reads and writes.
constexpr const char* kCaseFormat = "step5-case/1";

struct Case {
  LayerConfig config;
  std::vector<int32_t> context_lens;  // [R] history length of each request
  // History rows, request 0's positions 0.., then request 1's, ... (C rows).
  std::vector<uint16_t> context_key;        // [C, G, D] bf16 bits
  std::vector<uint16_t> context_value;      // [C, G, D] bf16 bits
  std::vector<uint16_t> context_index_key;  // [C, Di] bf16 bits (CSA)
  std::vector<float> context_index_z;       // [C] (CSA)
  std::vector<sim::StepInput> steps;

  int32_t num_requests() const { return static_cast<int32_t>(context_lens.size()); }
  int64_t context_rows() const;
  // Longest length any request reaches (history or after any step).
  int64_t max_context() const;
};

// Checks a case built in memory the way load_case checks a file: config,
// every shape against the config and query_start_loc, distinct request ids
// in [0, R), and the positions rule (a step's rows of a request start at
// seq_lens - query_len, never above what the request holds). Throws
// step5::Error(invalid_argument) naming the field, the expected value and
// the value found.
void validate_case(const Case& c);

// Throws step5::Error(io_error) for a file that is missing or not a
// well-formed `step5-case/1` safetensors file (every message names the
// tensor or metadata key, what was expected and what was found), and
// invalid_argument when it is well-formed but describes an invalid case.
Case load_case(const std::string& path);
// Deterministic: saving the same case twice gives identical bytes.
void save_case(const std::string& path, const Case& c);

// What a replay produced. `checks` is filled only when the replay checked
// against the oracle; it is not part of the file.
struct CaseOutputs {
  std::vector<sim::StepOutput> steps;
  std::vector<sim::CheckResult> checks;
};

// Writes SPEC 10's output tensors for each step s: step{s}.output bf16
// [n, H, D]; CSA also step{s}.selected i32 [n, G, K], step{s}.closed i32
// [Rs] and step{s}.summary f32 [Rs, max closed, Di].
void save_case_outputs(const std::string& path, const Case& c, const CaseOutputs& outputs);
// Reads outputs written for `c`, checking every shape against it.
CaseOutputs load_case_outputs(const std::string& path, const Case& c);

struct ReplayOptions {
  bool check = false;  // compare each step with the oracle (sim::check_step)
  // Tolerances for the check; default_tolerance(config) when unset.
  bool has_tolerance = false;
  sim::Tolerance tolerance;
  // Called after each step with its output and, when checking, its result.
  std::function<void(size_t step, const sim::StepOutput&, const sim::CheckResult*)> on_step;
  // Memory bound, checked before anything is allocated: a case whose
  // replay_memory_bytes exceed max_memory_bytes or, when that is 0,
  // memory_base_bytes + memory_per_case_byte * case_bytes, is refused with
  // invalid_argument, so a small or malformed case cannot make the replay
  // allocate much more than its own size.
  int64_t max_memory_bytes = 0;
  int64_t memory_base_bytes = int64_t{1} << 30;
  int64_t memory_per_case_byte = 16;
};

// The bytes of a case's tensors (what its file holds, less the header).
double case_bytes(const Case& c);
// An upper estimate of what replay_case allocates for `c`: the session's
// cache and rings, every step's retained outputs (output, selected,
// summaries), the largest step's transient buffers and scores workspace,
// and with `check` the oracle's fp32 histories.
double replay_memory_bytes(const Case& c, bool check);
// The limit `options` sets for `c` (see ReplayOptions).
double replay_memory_limit(const Case& c, const ReplayOptions& options);

// Replays `c` on `backend`: one sim::LayerSession sized for the case (request
// r uses ring index r), each request's history written through write_kv and
// update_summaries, then every step in order on that one cache. Throws
// invalid_argument (before allocating) when the case needs more memory than
// `options` allow.
CaseOutputs replay_case(Backend& backend, const Case& c, const ReplayOptions& options = {});

}  // namespace step5
