// `step5attn soak`, the workload: one long request grown by chunked prefill,
// then decode and MTP verify steps with random acceptance (rejected drafts
// rewritten by the next step), mixed with short requests that come and go.
// An engine's scheduler in miniature: it owns the block pool (freed blocks
// handed out again in shuffled order), the ring entries (persistent-batch
// slots, reused), every step's metadata and its random inputs.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "step5/config.h"
#include "step5/testing/sim.h"
#include "step5/testing/step_buffers.h"

namespace step5::tool::soak {

struct SoakOptions {
  std::string device = "auto";
  int64_t context = int64_t{1} << 20;  // tokens of the long request before decoding
  int64_t steps = 2000;                // decode / verify steps after the long prefill
  DType kv_dtype = DType::bf16;
  bool spec_shapes = true;  // SPEC 2 reference shapes; false: the demo's reduced ones
  int64_t chunk = 2048;     // prefill tokens per step
  int64_t check_every = 100;
  int64_t check_rows = 4;
  int64_t repeat_every = 50;
  int64_t short_requests = 6;
  uint64_t seed = 1;
  int64_t max_seconds = 0;  // 0: no bound
  std::string json_path;
  bool inject_corruption = false;
};

// The two layers of the soak, CSA then SWA, MTP k = 3, on one block table.
std::vector<LayerConfig> soak_layers(bool spec_shapes, DType kv_dtype);

// Step labels, also the keys of the "steps by kind" table.
constexpr const char* kContextStep = "context";  // long prefill chunk, cache writes only
constexpr const char* kPrefillStep = "prefill";  // long prefill's last chunk, whole forward
constexpr const char* kMixedStep = "mixed";      // decode/verify rows + short prefill chunks
constexpr const char* kDecodeStep = "decode";    // one row per request
constexpr const char* kVerifyStep = "verify";    // k + 1 rows per request

struct Request {
  int64_t serial = 0;  // distinct over the run
  int32_t ring = 0;    // ring entry (persistent-batch slot)
  bool is_long = false;
  int64_t prompt = 0;       // tokens to prefill
  int64_t length = 0;       // tokens held (accepted)
  int32_t decode_left = 0;  // decode/verify steps before it finishes (short requests)
  std::vector<int32_t> blocks;
};

// One scheduled step: metadata, each layer's inputs, and per step request
// what it is (the request's serial, where its rows start, decode or not).
struct ScheduledStep {
  std::string label;
  bool write_only = false;  // KV and summaries only (write_kv + update_summaries)
  sim::StepHost host;
  std::vector<int64_t> serial;         // [Rs]
  std::vector<char> decoding;          // [Rs] decode/verify rows (not a prefill chunk)
  std::vector<char> verifying;         // [Rs] verify rows (acceptance drawn after the step)
  std::vector<sim::StepInput> inputs;  // [layers]; request/qsl/seq_lens as in host

  int64_t num_tokens() const { return host.query_start_loc.back(); }
  int32_t num_requests() const { return static_cast<int32_t>(host.seq_lens.size()); }
  // Every request has at most k + 1 rows: rerunning the step rewrites only
  // what a rejected-draft rewrite may (the ring keeps 7 + k + 1 rows).
  bool rerunnable(int spec_tokens) const;
};

class Workload {
 public:
  Workload(const std::vector<LayerConfig>& layers, const SoakOptions& options);

  int64_t num_blocks() const { return num_blocks_; }
  int32_t max_blocks() const { return max_blocks_; }
  int32_t ring_entries() const { return ring_entries_; }
  int64_t max_step_tokens() const;
  int64_t max_context() const { return int64_t{max_blocks_} * block_size_; }

  bool long_prefill_done() const { return requests_.front().length >= options_.context; }
  // The next step: a long prefill chunk until the context is reached, then
  // decode/verify steps with short requests arriving and prefilling.
  ScheduledStep next();
  // Draws acceptance of the step's verify rows and retires finished short
  // requests (their blocks and ring entries go back to the pools). Returns
  // the serials retired.
  std::vector<int64_t> finish(const ScheduledStep& step);

  const std::vector<Request>& live() const { return requests_; }
  const Request& long_request() const { return requests_.front(); }
  int64_t blocks_reused() const { return blocks_reused_; }
  int64_t rings_reused() const { return rings_reused_; }
  int64_t short_requests_started() const { return serial_ - 1; }

 private:
  void maybe_start_short_request();
  void grow(Request& request, int64_t length);
  void fill_inputs(ScheduledStep& step);
  void fill_bf16(std::vector<uint16_t>& out, size_t count);

  std::vector<LayerConfig> layers_;
  SoakOptions options_;
  int32_t block_size_ = 0;
  int32_t spec_tokens_ = 0;
  int64_t num_blocks_ = 0;
  int32_t max_blocks_ = 0;
  int32_t ring_entries_ = 0;
  int64_t short_max_prompt_ = 0;
  std::vector<Request> requests_;  // [0] is the long request
  std::vector<int32_t> free_blocks_;
  std::vector<char> block_used_before_;
  std::vector<int32_t> free_rings_;
  std::vector<char> ring_used_before_;
  int64_t blocks_reused_ = 0;
  int64_t rings_reused_ = 0;
  int64_t serial_ = 1;
  std::mt19937_64 rng_;
  uint64_t fast_state_ = 0;
  std::vector<uint16_t> normal_table_;  // bf16 N(0, 1) samples the fast fill draws from
};

}  // namespace step5::tool::soak
