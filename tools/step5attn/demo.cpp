// `step5attn demo`: the main job. An embedded serving run (requests with
// long prompts prefilled in chunks, then decode or MTP verify steps with
// random acceptance, whose rejected drafts later steps rewrite) on CSA and
// SWA layers, every step checked against the oracle.
#include <chrono>
#include <iostream>
#include <limits>

#include "step5/testing/case_file.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"
#include "step5attn/help.h"
#include "step5attn/layers.h"
#include "step5attn/report.h"

namespace step5::tool {
namespace {

// MTP k = 3 (verify steps with random acceptance, rejected drafts rewritten)
// and plain decode for each layer kind, with bf16 and fp8 KV crossed over
// them and both summary dtypes on the CSA runs. The first run is the one
// --write-case saves.
std::vector<LayerConfig> demo_layers() {
  std::vector<LayerConfig> layers = {
      reduced_layer(LayerKind::csa, 3, DType::bf16),
      reduced_layer(LayerKind::swa, 3, DType::fp8_e4m3),
      reduced_layer(LayerKind::csa, 0, DType::fp8_e4m3),
      reduced_layer(LayerKind::swa, 0, DType::bf16),
  };
  layers[2].summary_dtype = DType::bf16;
  return layers;
}

// Output rows past n a step asks for, as CUDA-graph padding does; they
// must come back zero.
constexpr int64_t kPaddingRows = 3;

struct LayerRun {
  int steps = 0;
  int failures = 0;
  double seconds = 0;
};

LayerRun run_layer(Backend& backend, const LayerConfig& config, const sim::ScenarioOptions& so,
                   std::vector<sim::StepInput>* record) {
  sim::Scenario scenario(config, so);
  sim::SessionOptions options;
  options.max_requests = so.requests;
  options.max_context = scenario.max_context();
  options.seed = so.seed;
  options.padding_rows = kPaddingRows;
  sim::LayerSession session(backend, config, options);
  const sim::Tolerance tolerance = sim::default_tolerance(config);
  const bool exact_summaries = backend.kind() == BackendKind::cpu;
  const std::string layer = layer_kind_name(config.kind);

  LayerRun run;
  while (!scenario.done()) {
    sim::ScenarioStep step = scenario.next();
    const sim::StepOutput out = session.run(step.input);
    sim::CheckResult check = sim::check_step(session, step.input, out, tolerance, exact_summaries);
    if (check.ok && !out.padding_zero) {
      check.ok = false;
      check.message = "output padding rows past n are not zero";
    }
    print_step_row(std::cout, layer, static_cast<size_t>(run.steps), step.label, step.input, out,
                   &check);
    ++run.steps;
    run.failures += check.ok ? 0 : 1;
    run.seconds += out.seconds;
    if (record) record->push_back(std::move(step.input));
  }
  return run;
}

}  // namespace

int run_demo(int argc, char** argv) {
  std::string device = "auto", seed_text = "7", steps_text = "6", case_path;
  std::vector<std::string> positional;
  std::string error;
  int64_t seed = 0, steps = 0;
  if (!parse_args(argc, argv,
                  {{"device", &device},
                   {"seed", &seed_text},
                   {"steps", &steps_text},
                   {"write-case", &case_path}},
                  positional, error) ||
      !positional.empty()) {
    print_error("demo", error.empty() ? "unexpected argument '" + positional[0] + "'" : error);
    print_command_help(std::cerr, *find_help("demo"));
    return kExitUsage;
  }
  if (!valid_device(device)) {
    print_error("demo", "--device: expected cpu, cuda or auto, got '" + device + "'");
    return kExitUsage;
  }
  if (!parse_int(seed_text, 0, std::numeric_limits<int64_t>::max(), seed)) {
    print_error("demo", "--seed: expected a non-negative integer, got '" + seed_text + "'");
    return kExitUsage;
  }
  if (!parse_int(steps_text, 0, 10000, steps)) {
    print_error("demo", "--steps: expected an integer in 0..10000, got '" + steps_text + "'");
    return kExitUsage;
  }
  auto backend = open_backend(device, std::cout);

  sim::ScenarioOptions so;
  so.seed = static_cast<uint64_t>(seed);
  so.decode_steps = static_cast<int>(steps);
  std::cout << "scenario: " << so.requests << " requests, prompts " << so.min_prompt << ".."
            << so.max_prompt << " tokens prefilled in chunks of " << so.chunk << ", then "
            << so.decode_steps << " decode/verify steps; seed " << so.seed << "\n";

  print_legend(std::cout, true);
  const auto start = std::chrono::steady_clock::now();
  int total_steps = 0, total_failures = 0;
  const std::vector<LayerConfig> layers = demo_layers();
  std::vector<sim::StepInput> recorded;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerConfig& config = layers[i];
    std::cout << "\nlayer: " << describe(config) << "\n";
    print_tolerance(std::cout, sim::default_tolerance(config), backend->kind() == BackendKind::cpu);
    print_step_header(std::cout, true);
    const bool record = i == 0 && !case_path.empty();
    const LayerRun run = run_layer(*backend, config, so, record ? &recorded : nullptr);
    std::cout << layer_kind_name(config.kind) << ": " << run.steps << " steps, "
              << run.steps - run.failures << " match the oracle, forward time " << run.seconds * 1e3
              << " ms\n";
    total_steps += run.steps;
    total_failures += run.failures;
  }
  if (!case_path.empty()) {
    Case c;
    c.config = layers[0];
    c.context_lens.assign(static_cast<size_t>(so.requests), 0);
    c.steps = std::move(recorded);
    save_case(case_path, c);
    std::cout << "case: wrote the first CSA run (" << c.steps.size() << " steps) to " << case_path
              << "\n";
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\n"
            << (total_failures ? "FAILED" : "ok") << ": " << total_steps - total_failures << " of "
            << total_steps << " steps match the oracle (" << wall << " s with checking)\n";
  return total_failures ? kExitFailure : kExitOk;
}

}  // namespace step5::tool
