// step5attn: the command-line face of the library. Every subcommand lives
// in its own file; this table is the only place that lists them, help.cpp
// the only place that describes them.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "step5/error.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"
#include "step5attn/help.h"

namespace step5::tool {
namespace {

// From project(... VERSION) in the top-level CMakeLists.txt.
constexpr const char* kVersion = STEP5_VERSION;

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  bool needs_cuda;  // refused with kExitCannotRun where cuda cannot run
};

constexpr Command kCommands[] = {
    {"demo", run_demo, false},  {"replay", run_replay, false}, {"version", run_version, false},
    {"bench", run_bench, true}, {"check", run_check, true},    {"soak", run_soak, false},
};

bool is_help(const char* arg) {
  return !std::strcmp(arg, "--help") || !std::strcmp(arg, "-h");
}

// Checks argv against the options its help synopsis names ("--flag", or
// "--name VALUE" when an upper-case word follows), so that a GPU command
// reports bad usage (exit 2) before reporting it cannot run here (exit 3).
bool options_ok(const CommandHelp& help, int argc, char** argv, std::string& error) {
  std::istringstream words(help.synopsis);
  std::vector<std::string> tokens;
  for (std::string w; words >> w;) {
    w.erase(std::remove_if(w.begin(), w.end(), [](char ch) { return ch == '[' || ch == ']'; }),
            w.end());
    if (!w.empty() && w != "|") tokens.push_back(w);
  }
  // Deques: the options point at their elements, which must not move.
  std::deque<std::string> names, values;
  std::deque<bool> flags;
  std::vector<Option> options;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].rfind("--", 0) != 0) continue;
    names.push_back(tokens[i].substr(2));
    const bool takes_value =
        i + 1 < tokens.size() && std::isupper(static_cast<unsigned char>(tokens[i + 1][0]));
    if (takes_value) {
      values.emplace_back();
      options.push_back({names.back().c_str(), &values.back(), nullptr});
    } else {
      flags.push_back(false);
      options.push_back({names.back().c_str(), nullptr, &flags.back()});
    }
  }
  std::vector<std::string> positional;
  return parse_args(argc, argv, options, positional, error);
}

int dispatch(const Command& c, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (is_help(argv[i])) {
      print_command_help(std::cout, *find_help(c.name));
      return kExitOk;
    }
  }
  if (c.needs_cuda) {
    std::string error;
    if (!options_ok(*find_help(c.name), argc, argv, error)) {
      print_error(c.name, error);
      print_command_help(std::cerr, *find_help(c.name));
      return kExitUsage;
    }
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) {
      print_error(c.name, "cannot run here: needs the cuda backend: " + why);
      return kExitCannotRun;
    }
  }
  try {
    return c.run(argc, argv);
  } catch (const CannotRunHere& e) {
    print_error(c.name, std::string("cannot run here: ") + e.what());
    return kExitCannotRun;
  } catch (const Error& e) {
    print_error(c.name, e.what());
    return kExitFailure;
  } catch (const std::exception& e) {
    print_error(c.name, std::string("internal error: ") + e.what());
    return kExitFailure;
  }
}

}  // namespace

int run_version(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string error;
  if (!parse_args(argc, argv, {}, positional, error) || !positional.empty()) {
    print_error("version", error.empty() ? "takes no arguments" : error);
    return kExitUsage;
  }
  std::cout << "step5attn " << kVersion << " (backends: cpu"
#ifdef STEP5_HAVE_CUDA
            << ", cuda sm_90a"
#endif
            << ")\n";
  const std::string why = cuda_unavailable_reason();
  std::cout << "cuda: " << (why.empty() ? "can run here" : "cannot run here: " + why) << "\n";
  return kExitOk;
}

}  // namespace step5::tool

int main(int argc, char** argv) {
  using namespace step5::tool;
  if (argc < 2 || is_help(argv[1]) || !std::strcmp(argv[1], "help")) {
    if (argc >= 3) {
      if (const CommandHelp* help = find_help(argv[2])) {
        print_command_help(std::cout, *help);
        return kExitOk;
      }
    }
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) return dispatch(c, argc - 1, argv + 1);
  }
  std::cerr << "step5attn: unknown command '" << argv[1] << "'\n\n";
  print_usage(std::cerr);
  return kExitUsage;
}
