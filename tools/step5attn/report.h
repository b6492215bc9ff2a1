// The per-step table printed by demo and replay.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>

#include "step5/testing/sim.h"

namespace step5::tool {

// "decode" (every request 1 token), "verify" (every request spec_tokens + 1),
// "prefill" (every request longer), "mixed" otherwise, "empty" without rows.
std::string step_label(const sim::StepInput& input, int spec_tokens);

// What each column of the step table means, printed once before the tables.
void print_legend(std::ostream& out, bool checked);
// The bounds a checked step must meet.
void print_tolerance(std::ostream& out, const sim::Tolerance& tolerance, bool exact_summaries);

void print_step_header(std::ostream& out, bool checked);
// `check` may be null (no oracle comparison).
void print_step_row(std::ostream& out, const std::string& layer, size_t step,
                    const std::string& label, const sim::StepInput& input,
                    const sim::StepOutput& output, const sim::CheckResult* check);

}  // namespace step5::tool
