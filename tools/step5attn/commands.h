// Subcommands of the step5attn tool. Each takes its own argv (argv[0] is the
// command name), returns the process exit code (cli.h: 0 ok, 1 failure,
// 2 usage, 3 cannot run here) and reports its own bad arguments. main.cpp
// lists them in one table and answers --help from help.cpp; adding a
// command is a declaration here, a row there and its help text.
#pragma once

namespace step5::tool {

int run_demo(int argc, char** argv);     // embedded serving run, checked
int run_replay(int argc, char** argv);   // SPEC 10 case files
int run_version(int argc, char** argv);  // library version
int run_bench(int argc, char** argv);    // cuda attention check + timings (SPEC 9)
int run_check(int argc, char** argv);    // cuda backend vs cpu reference on this GPU
int run_soak(int argc, char** argv);     // long bounded run vs a reference, determinism

}  // namespace step5::tool
