// `step5attn soak`: a bounded long run of one backend against a reference
// (soak_reference.h): a long request grown by chunked prefill, then
// thousands of decode and MTP verify steps mixed with short requests that
// come and go, on a CSA and an SWA layer. Every step's DeviceStatus must be
// zero, sampled rows match the reference, sampled steps run twice give the
// same bits, and at the end every live request's summaries and K/V equal
// the reference's bit for bit.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <random>

#include "step5attn/cli.h"
#include "step5attn/commands.h"
#include "step5attn/help.h"
#include "step5attn/soak_engine.h"
#include "step5attn/soak_reference.h"
#include "step5attn/soak_report.h"
#include "step5attn/soak_workload.h"

namespace step5::tool {
namespace {

using namespace soak;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Parses argv into `o`; false (after printing why) on bad usage.
bool parse_options(int argc, char** argv, SoakOptions& o) {
  std::string context = std::to_string(o.context), steps = std::to_string(o.steps);
  std::string kv = "bf16", shapes = "spec", chunk = std::to_string(o.chunk);
  std::string check_every = std::to_string(o.check_every);
  std::string check_rows = std::to_string(o.check_rows);
  std::string repeat_every = std::to_string(o.repeat_every);
  std::string short_requests = std::to_string(o.short_requests), seed = "1", max_seconds = "0";
  std::vector<std::string> positional;
  std::string error;
  auto usage = [](const std::string& why) {
    print_error("soak", why);
    print_command_help(std::cerr, *find_help("soak"));
    return false;
  };
  if (!parse_args(argc, argv,
                  {{"device", &o.device},
                   {"context", &context},
                   {"steps", &steps},
                   {"kv-dtype", &kv},
                   {"shapes", &shapes},
                   {"chunk", &chunk},
                   {"check-every", &check_every},
                   {"check-rows", &check_rows},
                   {"repeat-every", &repeat_every},
                   {"short-requests", &short_requests},
                   {"seed", &seed},
                   {"max-seconds", &max_seconds},
                   {"json", &o.json_path},
                   {"inject-corruption", nullptr, &o.inject_corruption}},
                  positional, error)) {
    return usage(error);
  }
  if (!positional.empty()) return usage("unexpected argument '" + positional[0] + "'");
  if (!valid_device(o.device)) return usage("--device: expected cpu, cuda or auto");
  if (kv != "bf16" && kv != "fp8") return usage("--kv-dtype: expected bf16 or fp8, got " + kv);
  o.kv_dtype = kv == "bf16" ? DType::bf16 : DType::fp8_e4m3;
  if (shapes != "spec" && shapes != "small") {
    return usage("--shapes: expected spec or small, got " + shapes);
  }
  o.spec_shapes = shapes == "spec";
  int64_t seed_value = 0;
  // Positions are i32: the context and its growth must stay below 2^31.
  const struct {
    const char* name;
    const std::string& text;
    int64_t min, max;
    int64_t* out;
  } ints[] = {
      {"--context", context, 16, int64_t{1} << 30, &o.context},
      {"--steps", steps, 0, 1000000, &o.steps},
      {"--chunk", chunk, 64, 65536, &o.chunk},
      {"--check-every", check_every, 1, 1000000, &o.check_every},
      {"--check-rows", check_rows, 1, 64, &o.check_rows},
      {"--repeat-every", repeat_every, 0, 1000000, &o.repeat_every},
      {"--short-requests", short_requests, 0, 64, &o.short_requests},
      {"--seed", seed, 0, std::numeric_limits<int64_t>::max(), &seed_value},
      {"--max-seconds", max_seconds, 0, 86400, &o.max_seconds},
  };
  for (const auto& i : ints) {
    if (!parse_int(i.text, i.min, i.max, *i.out)) {
      return usage(std::string(i.name) + ": expected an integer in " + std::to_string(i.min) +
                   ".." + std::to_string(i.max) + ", got '" + i.text + "'");
    }
  }
  o.seed = static_cast<uint64_t>(seed_value);
  return true;
}

// Up to `count` rows of the step: always the long request's last row (the
// one at the longest context), then distinct random rows.
std::vector<int64_t> sample_rows(const ScheduledStep& step, int64_t count, std::mt19937_64& rng) {
  std::vector<int64_t> rows;
  const int64_t n = step.num_tokens();
  for (size_t m = 0; m < step.serial.size(); ++m) {
    if (step.serial[m] == 0) rows.push_back(step.host.query_start_loc[m + 1] - 1);
  }
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int64_t tries = 0;
       static_cast<int64_t>(rows.size()) < std::min(count, n) && tries < 8 * count; ++tries) {
    const int64_t t = pick(rng);
    if (std::find(rows.begin(), rows.end(), t) == rows.end()) rows.push_back(t);
  }
  return rows;
}

// --inject-corruption: one bit of one closed-region summary of the long
// request in the device's CSA cache, a region no later step rewrites. The
// run must then fail; the ctest that passes this flag expects it to.
void inject_corruption(Engine& device, const Workload& workload) {
  const LayerConfig& c = device.layers().front();
  const Request& r = workload.long_request();
  const int64_t region = r.length / kRegionSize / 2;
  const int64_t per_block = c.block_size / kRegionSize;
  const int32_t block = r.blocks[static_cast<size_t>(region / per_block)];
  const int64_t offset = static_cast<int64_t>(block) * static_cast<int64_t>(device.block_bytes(0)) +
                         static_cast<int64_t>(kv_bytes_per_block(c)) +
                         (region % per_block) * device.cache(0).summaries.region_stride;
  device.flip_byte(0, offset);
  std::cout << "injected: flipped a bit of the summary of region " << region
            << " of the long request (csa layer)\n";
}

std::string fault_text(const DeviceStatus& s, const std::string& label, int64_t step) {
  return std::string(device_fault_name(static_cast<DeviceFault>(s.fault))) + " (code " +
         std::to_string(s.fault) + ", row " + std::to_string(s.row) + ", value " +
         std::to_string(s.value) + ", count " + std::to_string(s.count) + ") at " + label +
         " step " + std::to_string(step);
}

}  // namespace

int run_soak(int argc, char** argv) {
  SoakOptions o;
  if (!parse_options(argc, argv, o)) return kExitUsage;
  const Clock::time_point start = Clock::now();
  auto backend = open_backend(o.device, std::cout);
  const std::vector<LayerConfig> layers = soak_layers(o.spec_shapes, o.kv_dtype);
  Workload workload(layers, o);
  const StepLimits limits{workload.max_step_tokens(), workload.ring_entries(),
                          workload.max_context()};
  Engine device(*backend, layers, workload.num_blocks(), workload.ring_entries(), limits);
  std::unique_ptr<Reference> reference =
      backend->kind() == BackendKind::cuda
          ? make_cpu_mirror(layers, workload.num_blocks(), workload.ring_entries(), limits)
          : make_oracle_reference(layers);

  SoakReport report;
  report.device = backend_kind_name(backend->kind());
  report.reference = reference->name();
  for (const LayerConfig& c : layers)
    report.layers += (report.layers.empty() ? "" : "; ") + describe(c);
  report.kv_dtype = o.kv_dtype == DType::bf16 ? "bf16" : "fp8_e4m3";
  report.spec_shapes = o.spec_shapes;
  report.seed = o.seed;
  report.requested_context = o.context;
  report.requested_steps = o.steps;
  std::cout << "soak: long request to " << o.context << " tokens in chunks of " << o.chunk
            << ", then " << o.steps << " decode/verify steps with up to " << o.short_requests
            << " short requests; " << workload.num_blocks() << " blocks, "
            << workload.ring_entries() << " ring entries; reference: " << report.reference << "\n";
  for (const LayerConfig& c : layers) std::cout << "layer: " << describe(c) << "\n";

  std::mt19937_64 rows_rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  bool repeat_due = false, injected = false;
  double last_progress = 0;
  const int k = layers.front().spec_tokens;
  while (!workload.long_prefill_done() || report.decode_steps < o.steps) {
    if (o.max_seconds > 0 && since(start) > static_cast<double>(o.max_seconds)) {
      report.stopped_early = true;
      report.stop_reason = "--max-seconds " + std::to_string(o.max_seconds) + " reached";
      break;
    }
    const bool decode_phase = workload.long_prefill_done();
    if (decode_phase && o.inject_corruption && !injected) {
      inject_corruption(device, workload);
      injected = report.corruption_injected = true;
    }
    const ScheduledStep step = workload.next();
    const int64_t index = report.decode_steps;
    const bool check = step.label == kPrefillStep || (decode_phase && index % o.check_every == 0);
    repeat_due = repeat_due || (decode_phase && o.repeat_every > 0 && index % o.repeat_every == 0);
    const bool repeat = repeat_due && step.rerunnable(k);

    const StepResult result = device.run(step, repeat);
    report.device_seconds += result.seconds;
    ++report.steps_by_kind[step.label];
    report.uniform_plans += result.kind == StepKind::uniform ? 1 : 0;
    report.tokens += step.num_tokens();
    for (const DeviceStatus* s :
         {&result.status, result.repeated ? &result.repeat_status : nullptr}) {
      if (s == nullptr) continue;
      ++report.status_reads;
      if (s->fault != 0 || s->count != 0) {
        if (report.status_faults++ == 0) report.first_fault = fault_text(*s, step.label, index);
      }
    }
    if (repeat) {
      repeat_due = false;
      ++report.repeats;
      report.repeat_mismatches += result.repeat_mismatches;
    }

    Clock::time_point t = Clock::now();
    reference->record(step);
    report.reference_write_seconds += since(t);
    if (check) {
      t = Clock::now();
      const std::vector<int64_t> rows = sample_rows(step, o.check_rows, rows_rng);
      ++report.steps_checked;
      for (size_t l = 0; l < layers.size(); ++l) {
        const RowsCheck rc = reference->check_rows(step, l, rows, result.layers[l]);
        report.rows_checked += rc.rows;
        report.selection_differs += rc.selection_differs;
        report.worst_rel_l2 = std::max(report.worst_rel_l2, rc.rel_l2);
        report.worst_max_abs = std::max(report.worst_max_abs, rc.max_abs);
        if (!rc.ok && report.check_failures++ == 0) {
          report.first_check_failure =
              step.label + " step " + std::to_string(index) + ": " + rc.message;
        }
      }
      const double seconds = since(t);
      report.reference_check_seconds += seconds;
      report.slowest_check_seconds = std::max(report.slowest_check_seconds, seconds);
    }
    for (const int64_t serial : workload.finish(step)) reference->forget(serial);
    if (decode_phase) ++report.decode_steps;
    if (since(start) - last_progress >= 10) {
      last_progress = since(start);
      std::cout << "  [" << static_cast<int64_t>(last_progress) << " s] context "
                << workload.long_request().length << ", decode/verify steps " << report.decode_steps
                << ", live requests " << workload.live().size() << ", faults "
                << report.status_faults << ", check failures " << report.check_failures << "\n"
                << std::flush;
    }
  }

  const Clock::time_point t = Clock::now();
  std::cout << "comparing every live request's summaries and K/V with the reference...\n"
            << std::flush;
  report.cache = reference->compare(device, workload.live());
  report.compare_seconds = since(t);
  report.final_context = workload.long_request().length;
  report.short_requests = workload.short_requests_started();
  report.blocks_reused = workload.blocks_reused();
  report.rings_reused = workload.rings_reused();
  report.wall_seconds = since(start);
  print_report(std::cout, report);
  if (!o.json_path.empty()) {
    write_report_json(o.json_path, report);
    std::cout << "json: " << o.json_path << "\n";
  }
  return report.ok() ? kExitOk : kExitFailure;
}

}  // namespace step5::tool
