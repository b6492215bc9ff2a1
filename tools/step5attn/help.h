// Every subcommand's help text, in one table: `step5attn <command> --help`
// prints it (main.cpp answers --help before the command parses anything),
// and the README's synopsis is checked against it.
#pragma once

#include <iosfwd>
#include <string>

namespace step5::tool {

struct CommandHelp {
  const char* name;
  const char* synopsis;  // the arguments after "step5attn <name>"
  const char* summary;   // one line for `step5attn --help`
  const char* details;   // what it does, every flag, exit codes
};

// Null for an unknown command.
const CommandHelp* find_help(const std::string& name);

// `step5attn --help`: every command's synopsis and summary.
void print_usage(std::ostream& out);
// `step5attn <name> --help`: the usage line, then the details.
void print_command_help(std::ostream& out, const CommandHelp& help);

}  // namespace step5::tool
