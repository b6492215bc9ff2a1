// `step5attn replay CASE`: runs a SPEC 10 case file on one backend.
#include <iostream>

#include "step5/testing/case_file.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"
#include "step5attn/report.h"

namespace step5::tool {
namespace {

constexpr const char* kUsage =
    "usage: step5attn replay CASE [--device cpu|cuda|auto] [--out FILE] [--check]\n"
    "  --device   backend to run on (default cpu; auto: cuda when it can run here)\n"
    "  --out      write each step's outputs (SPEC 10 output tensors) to FILE\n"
    "  --check    compare every step with the oracle; exit 1 on a mismatch\n";

}  // namespace

int run_replay(int argc, char** argv) {
  std::string device = "cpu", out_path;
  bool check = false, help = false;
  std::vector<std::string> positional;
  std::string error;
  if (!parse_args(argc, argv,
                  {{"device", &device},
                   {"out", &out_path},
                   {"check", nullptr, &check},
                   {"help", nullptr, &help}},
                  positional, error) ||
      (!help && positional.size() != 1)) {
    print_error("replay", error.empty() ? "expected exactly one CASE file" : error);
    std::cerr << kUsage;
    return kExitUsage;
  }
  if (help) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (!valid_device(device)) {
    print_error("replay", "--device: expected cpu, cuda or auto, got '" + device + "'");
    return kExitUsage;
  }
  const Case c = load_case(positional[0]);
  std::cout << "case: " << positional[0] << ": " << describe(c.config) << ", " << c.num_requests()
            << " requests, " << c.context_rows() << " history rows, " << c.steps.size()
            << " steps\n";
  auto backend = open_backend(device, std::cout);

  ReplayOptions options;
  options.check = check;
  const std::string layer = layer_kind_name(c.config.kind);
  print_step_header(std::cout, check);
  options.on_step = [&](size_t s, const sim::StepOutput& out, const sim::CheckResult* result) {
    const sim::StepInput& in = c.steps[s];
    print_step_row(std::cout, layer, s, step_label(in, c.config.spec_tokens), in, out, result);
  };
  const CaseOutputs outputs = replay_case(*backend, c, options);

  int failures = 0;
  for (const sim::CheckResult& r : outputs.checks) failures += r.ok ? 0 : 1;
  if (!out_path.empty()) {
    save_case_outputs(out_path, c, outputs);
    std::cout << "outputs: " << out_path << "\n";
  }
  if (check) {
    std::cout << (failures ? "FAILED: " : "ok: ") << failures << " of " << outputs.checks.size()
              << " steps differ from the oracle\n";
  }
  return failures ? kExitFailure : kExitOk;
}

}  // namespace step5::tool
