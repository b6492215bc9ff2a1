// step5attn: the command-line face of the library. Every subcommand lives
// in its own file; this table is the only place that lists them.
#include <cstring>
#include <iostream>

#include "step5/error.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"

namespace step5::tool {
namespace {

// From project(... VERSION) in the top-level CMakeLists.txt.
constexpr const char* kVersion = STEP5_VERSION;

struct Command {
  const char* name;
  const char* synopsis;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"demo", "[--device cpu|cuda|auto] [--seed N] [--steps N] [--write-case FILE]",
     "run an embedded serving scenario on CSA and SWA layers, checked against the oracle",
     run_demo},
    {"replay", "CASE [--device cpu|cuda|auto] [--out FILE] [--check]",
     "replay a step5-case/1 file, optionally checking each step against the oracle", run_replay},
    {"version", "", "print the version and the backends built in", run_version},
    {"bench",
     "[--quick] [--filter A,B] [--json FILE] [--check-only] [--no-check] [--max-seconds N]",
     "check the cuda attention against cpu, then time SPEC 9 workloads", run_bench},
    {"check", "[--quick | --tiny]",
     "check every cuda operation and layer forward against the cpu reference", run_check},
};

void print_usage(std::ostream& out) {
  out << "usage: step5attn <command> [options]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    out << "  " << c.name << (*c.synopsis ? " " : "") << c.synopsis << "\n      " << c.summary
        << "\n";
  }
}

}  // namespace

int run_version(int argc, char** /*argv*/) {
  if (argc > 1) {
    print_error("version", "takes no arguments");
    return kExitUsage;
  }
  std::cout << "step5attn " << kVersion << " (backends: cpu"
#ifdef STEP5_HAVE_CUDA
            << ", cuda sm_90a"
#endif
            << ")\n";
  return kExitOk;
}

}  // namespace step5::tool

int main(int argc, char** argv) {
  using namespace step5::tool;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const step5::Error& e) {
      print_error(c.name, e.what());
      return kExitFailure;
    } catch (const std::exception& e) {
      print_error(c.name, std::string("internal error: ") + e.what());
      return kExitFailure;
    }
  }
  std::cerr << "step5attn: unknown command '" << argv[1] << "'\n\n";
  print_usage(std::cerr);
  return kExitUsage;
}
