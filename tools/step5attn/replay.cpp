// `step5attn replay CASE`: runs a SPEC 10 case file on one backend.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "step5/testing/case_file.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"
#include "step5attn/help.h"
#include "step5attn/report.h"

namespace step5::tool {

namespace {

// Why `out` cannot take the outputs of replaying `case_path`, or "". Checked
// before the case is read, so a bad --out costs no replay and never
// overwrites the case (same path, a hard link or a symlink to it).
std::string out_path_problem(const std::string& case_path, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::equivalent(case_path, out, ec) && !ec) {
    return "--out '" + out + "' is the case file itself; expected a different file";
  }
  if (fs::is_directory(out, ec)) return "--out '" + out + "' is a directory; expected a file";
  fs::path dir = fs::path(out).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) {
    return "--out '" + out + "': directory '" + dir.string() + "' does not exist";
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return "--out '" + out + "': directory '" + dir.string() + "' is not writable";
  }
  return "";
}

}  // namespace

int run_replay(int argc, char** argv) {
  std::string device = "cpu", out_path, max_memory_text;
  bool check = false;
  std::vector<std::string> positional;
  std::string error;
  if (!parse_args(argc, argv,
                  {{"device", &device},
                   {"out", &out_path},
                   {"check", nullptr, &check},
                   {"max-memory", &max_memory_text}},
                  positional, error) ||
      positional.size() != 1) {
    print_error("replay", error.empty() ? "expected exactly one CASE file" : error);
    print_command_help(std::cerr, *find_help("replay"));
    return kExitUsage;
  }
  if (!valid_device(device)) {
    print_error("replay", "--device: expected cpu, cuda or auto, got '" + device + "'");
    return kExitUsage;
  }
  int64_t max_memory_mib = 0;
  if (!max_memory_text.empty() &&
      !parse_int(max_memory_text, 1, int64_t{1} << 30, max_memory_mib)) {
    print_error("replay",
                "--max-memory: expected MiB in 1..1073741824, got '" + max_memory_text + "'");
    return kExitUsage;
  }
  if (!out_path.empty()) {
    const std::string problem = out_path_problem(positional[0], out_path);
    if (!problem.empty()) {
      print_error("replay", problem);
      return kExitUsage;
    }
  }
  const Case c = load_case(positional[0]);
  std::cout << "case: " << positional[0] << ": " << describe(c.config) << ", " << c.num_requests()
            << " requests, " << c.context_rows() << " history rows, " << c.steps.size()
            << " steps\n";
  auto backend = open_backend(device, std::cout);

  ReplayOptions options;
  options.check = check;
  options.max_memory_bytes = max_memory_mib << 20;
  const std::string layer = layer_kind_name(c.config.kind);
  print_legend(std::cout, check);
  if (check) {
    print_tolerance(std::cout, sim::default_tolerance(c.config),
                    backend->kind() == BackendKind::cpu);
  }
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
