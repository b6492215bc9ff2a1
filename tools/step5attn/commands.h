// Subcommands of the step5attn tool. Each returns the process exit code and
// prints its own usage on bad arguments.
#pragma once

namespace step5::tool {

int run_demo(int argc, char** argv);    // embedded serving run, checked
int run_replay(int argc, char** argv);  // SPEC 10 case files

}  // namespace step5::tool
