#include "step5attn/report.h"

#include <cstdio>
#include <ostream>

namespace step5::tool {

std::string step_label(const sim::StepInput& input, int spec_tokens) {
  if (input.num_tokens() == 0) return "empty";
  bool all_decode = true, all_verify = spec_tokens > 0, all_prefill = true;
  for (size_t r = 0; r + 1 < input.query_start_loc.size(); ++r) {
    const int32_t len = input.query_start_loc[r + 1] - input.query_start_loc[r];
    all_decode = all_decode && len == 1;
    all_verify = all_verify && len == spec_tokens + 1;
    all_prefill = all_prefill && len > spec_tokens + 1;
  }
  return all_decode ? "decode" : all_verify ? "verify" : all_prefill ? "prefill" : "mixed";
}

void print_legend(std::ostream& out, bool checked) {
  out << "legend:\n"
         "  label    prefill (every request more than k+1 tokens), decode (1 token each),\n"
         "           verify (k+1 tokens each, MTP), mixed (anything else)\n"
         "  reqs     requests in the step; rows: its query tokens (n)\n"
         "  path     the plan: uniform (decode/verify: rows derived on the device,\n"
         "           CUDA-graph capturable) or mixed (rows planned on the host)\n"
         "  time ms  plan + forward wall time of the step\n";
  if (checked) {
    out << "  max abs  largest |output - oracle| over the step\n"
           "  rel L2   ||output - oracle|| / ||oracle|| over the step\n"
           "  sel diff CSA rows whose top-k differs from the oracle's on a near-tie\n"
           "  result   ok, or MISMATCH and the first failure\n";
  }
}

void print_tolerance(std::ostream& out, const sim::Tolerance& t, bool exact_summaries) {
  char line[200];
  std::snprintf(line, sizeof line,
                "tolerance: rel L2 <= %.1e, max abs <= %.1e; selections may differ only on "
                "near-ties\n           (within %.0e of the largest score); ",
                t.rel_l2, t.max_abs, t.score);
  out << line << "summaries " << (exact_summaries ? "exactly the oracle's" : "within one ulp")
      << "; padding rows zero\n";
}

void print_step_header(std::ostream& out, bool checked) {
  char line[160];
  std::snprintf(line, sizeof line, "%-5s %4s  %-8s %4s %5s  %-7s %9s", "layer", "step", "label",
                "reqs", "rows", "path", "time ms");
  out << line;
  if (checked) {
    std::snprintf(line, sizeof line, "  %9s %9s %8s  %s", "max abs", "rel L2", "sel diff",
                  "result");
    out << line;
  }
  out << "\n";
}

void print_step_row(std::ostream& out, const std::string& layer, size_t step,
                    const std::string& label, const sim::StepInput& input,
                    const sim::StepOutput& output, const sim::CheckResult* check) {
  char line[200];
  std::snprintf(line, sizeof line, "%-5s %4zu  %-8s %4zu %5lld  %-7s %9.2f", layer.c_str(), step,
                label.c_str(), input.request.size(), static_cast<long long>(input.num_tokens()),
                step_kind_name(output.kind), output.seconds * 1e3);
  out << line;
  if (check) {
    std::snprintf(line, sizeof line, "  %9.2e %9.2e %8lld  %s", check->max_abs, check->rel_l2,
                  static_cast<long long>(check->selection_differs), check->ok ? "ok" : "MISMATCH");
    out << line;
    if (!check->ok) out << ": " << check->message;
  }
  out << "\n";
}

}  // namespace step5::tool
