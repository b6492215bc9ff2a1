// `step5attn soak`, the reference the backend under test is held to:
//   cuda run: the cpu backend as a mirror. It repeats every step's cache
//     writes (write_kv, update_summaries) on its own copy of the cache, so
//     at the end every summary and K/V row of every live request is compared
//     byte for byte; on sampled steps it recomputes sampled rows with the
//     single operations (scores, selection, attention) over that cache.
//   cpu run: the dense oracle (step5/testing/oracle.h) over each request's
//     history, the same checks at the small contexts a CI run uses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/sim.h"
#include "step5attn/soak_engine.h"
#include "step5attn/soak_workload.h"

namespace step5::tool::soak {

// Sampled rows of one layer of one step against the reference.
struct RowsCheck {
  int64_t rows = 0;
  double rel_l2 = 0;              // over the sampled rows
  double max_abs = 0;             // finite elements only; a non-finite one fails
  int64_t selection_differs = 0;  // rows whose (acceptable) selection differs
  bool ok = true;
  std::string message;  // first failure
};

// Every live request's cache at the end of the run against the reference.
struct CacheCompare {
  int64_t summaries = 0;  // closed regions compared (each Di values, bit for bit)
  int64_t summary_mismatches = 0;
  int64_t kv_rows = 0;  // (position, KV head) rows compared (K and V, bit for bit)
  int64_t kv_mismatches = 0;
  std::string first_mismatch;
};

class Reference {
 public:
  virtual ~Reference() = default;
  virtual std::string name() const = 0;
  // After the device ran `step`: what it wrote, mirrored.
  virtual void record(const ScheduledStep& step) = 0;
  // A request retired: its state may go.
  virtual void forget(int64_t serial) = 0;
  // Step rows `rows` of layer `layer`, as the device computed them.
  virtual RowsCheck check_rows(const ScheduledStep& step, size_t layer,
                               const std::vector<int64_t>& rows, const LayerResult& device) = 0;
  // Closed-region summaries and K/V of positions < length of every request.
  virtual CacheCompare compare(const Engine& device, const std::vector<Request>& live) = 0;
};

std::unique_ptr<Reference> make_cpu_mirror(const std::vector<LayerConfig>& layers,
                                           int64_t num_blocks, int32_t ring_entries,
                                           const StepLimits& limits);
std::unique_ptr<Reference> make_oracle_reference(const std::vector<LayerConfig>& layers);

// ---- shared by both references -------------------------------------------

// Where step row `t` comes from.
struct RowOrigin {
  size_t request = 0;    // index in the step
  int64_t position = 0;  // in its request
};
RowOrigin row_origin(const ScheduledStep& step, int64_t t);

// Accumulates a device output row against a reference row.
class OutputDiff {
 public:
  // `want` holds count reference values; `got` count bf16 bits.
  void add(const uint16_t* got, const double* want, size_t count);
  void finish(RowsCheck& check, const LayerConfig& config, int64_t rows) const;

 private:
  double err2_ = 0, ref2_ = 0, max_abs_ = 0;
  bool finite_ = true;
};

}  // namespace step5::tool::soak
