// `step5attn soak`, what a run found: the summary table it prints and the
// JSON it writes (--json). The JSON fields are stable; new ones are only added.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

#include "step5attn/soak_reference.h"

namespace step5::tool::soak {

struct SoakReport {
  std::string device;     // backend under test
  std::string reference;  // what it is held to
  std::string layers;     // describe() of each layer, "; "-joined
  std::string kv_dtype;
  bool spec_shapes = true;
  uint64_t seed = 0;

  std::map<std::string, int64_t> steps_by_kind;      // soak_workload.h labels
  int64_t uniform_plans = 0;                         // steps the planner found uniform
  int64_t tokens = 0;                                // query rows of every step
  int64_t requested_context = 0, final_context = 0;  // of the long request
  int64_t requested_steps = 0, decode_steps = 0;     // decode/verify-phase steps
  int64_t short_requests = 0, blocks_reused = 0, rings_reused = 0;

  CacheCompare cache;
  int64_t steps_checked = 0, rows_checked = 0, check_failures = 0, selection_differs = 0;
  double worst_rel_l2 = 0, worst_max_abs = 0;
  std::string first_check_failure;

  int64_t repeats = 0, repeat_mismatches = 0;
  int64_t status_reads = 0, status_faults = 0;
  std::string first_fault;

  bool corruption_injected = false;
  bool stopped_early = false;
  std::string stop_reason;
  double wall_seconds = 0, device_seconds = 0;
  double reference_write_seconds = 0;  // mirroring every step's cache writes
  double reference_check_seconds = 0, slowest_check_seconds = 0;
  double compare_seconds = 0;  // the final cache comparison

  bool ok() const {
    return cache.summary_mismatches == 0 && cache.kv_mismatches == 0 && check_failures == 0 &&
           repeat_mismatches == 0 && status_faults == 0;
  }
};

void print_report(std::ostream& out, const SoakReport& report);
void write_report_json(const std::string& path, const SoakReport& report);

}  // namespace step5::tool::soak
