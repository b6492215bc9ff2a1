#include "step5attn/soak_report.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <sstream>

#include "step5/error.h"

namespace step5::tool::soak {

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// JSON has no NaN or infinity: null.
std::string num(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream s;
  s.precision(6);
  s << x;
  return s.str();
}

std::string per_step_ms(double seconds, int64_t steps) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << (steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0.0) << " ms/step";
  return s.str();
}

int64_t total_steps(const SoakReport& r) {
  int64_t n = 0;
  for (const auto& [kind, count] : r.steps_by_kind) n += count;
  return n;
}

}  // namespace

void print_report(std::ostream& out, const SoakReport& r) {
  const int64_t steps = total_steps(r);
  std::ostringstream kinds;
  for (const auto& [kind, count] : r.steps_by_kind) kinds << " " << kind << " " << count;
  auto row = [&](const char* name, const std::string& value) {
    out << "  " << name;
    for (size_t i = std::string(name).size(); i < 28; ++i) out << ' ';
    out << value << "\n";
  };
  auto str = [](auto x) {
    std::ostringstream s;
    s << x;
    return s.str();
  };
  out << "\nsoak summary (" << (r.ok() ? "ok" : "FAILED")
      << (r.stopped_early ? ", partial: " + r.stop_reason : std::string()) << ")\n";
  row("device / reference", r.device + " / " + r.reference);
  row("kv dtype, shapes", r.kv_dtype + ", " + (r.spec_shapes ? "SPEC 2 reference" : "reduced"));
  row("steps by kind",
      str(steps) + " =" + kinds.str() + " (uniform plans " + str(r.uniform_plans) + ")");
  row("decode/verify steps", str(r.decode_steps) + " of " + str(r.requested_steps));
  row("tokens (query rows)", str(r.tokens));
  row("final context", str(r.final_context) + " of " + str(r.requested_context) + " tokens");
  row("short requests", str(r.short_requests) + " started; blocks reused " + str(r.blocks_reused) +
                            ", ring entries reused " + str(r.rings_reused));
  row("summaries compared", str(r.cache.summaries) + ", mismatches " +
                                str(r.cache.summary_mismatches) + " (bit for bit)");
  row("K/V rows compared", str(r.cache.kv_rows) + ", mismatches " + str(r.cache.kv_mismatches));
  row("outputs spot-checked", str(r.rows_checked) + " rows in " + str(r.steps_checked) +
                                  " steps, failures " + str(r.check_failures) +
                                  ", selections differing (accepted) " + str(r.selection_differs));
  row("worst rel_l2 / max_abs", num(r.worst_rel_l2) + " / " + num(r.worst_max_abs));
  row("determinism repeats", str(r.repeats) + ", mismatches " + str(r.repeat_mismatches));
  row("device status", str(r.status_reads) + " reads, non-zero " + str(r.status_faults));
  row("wall time", num(r.wall_seconds) + " s (device " + per_step_ms(r.device_seconds, steps) +
                       ", reference writes " + per_step_ms(r.reference_write_seconds, steps) +
                       ", reference checks " +
                       per_step_ms(r.reference_check_seconds, r.steps_checked) + ", slowest " +
                       num(r.slowest_check_seconds) + " s, final compare " +
                       num(r.compare_seconds) + " s)");
  if (r.corruption_injected) row("injected corruption", "one summary byte flipped on the device");
  if (!r.cache.first_mismatch.empty()) row("first cache mismatch", r.cache.first_mismatch);
  if (!r.first_check_failure.empty()) row("first check failure", r.first_check_failure);
  if (!r.first_fault.empty()) row("first device fault", r.first_fault);
}

void write_report_json(const std::string& path, const SoakReport& r) {
  std::ofstream f(path);
  if (!f) throw Error(ErrorCode::io_error, "soak --json: cannot write '" + path + "'");
  f << "{\n  \"ok\": " << (r.ok() ? "true" : "false")
    << ",\n  \"partial\": " << (r.stopped_early ? "true" : "false")
    << ",\n  \"stop_reason\": " << quoted(r.stop_reason) << ",\n  \"device\": " << quoted(r.device)
    << ",\n  \"reference\": " << quoted(r.reference) << ",\n  \"layers\": " << quoted(r.layers)
    << ",\n  \"kv_dtype\": " << quoted(r.kv_dtype)
    << ",\n  \"shapes\": " << quoted(r.spec_shapes ? "spec" : "small")
    << ",\n  \"seed\": " << r.seed << ",\n  \"steps_by_kind\": {";
  bool first = true;
  for (const auto& [kind, count] : r.steps_by_kind) {
    f << (first ? "" : ", ") << quoted(kind) << ": " << count;
    first = false;
  }
  f << "},\n  \"steps\": " << total_steps(r) << ",\n  \"uniform_plans\": " << r.uniform_plans
    << ",\n  \"decode_steps\": " << r.decode_steps
    << ",\n  \"requested_steps\": " << r.requested_steps << ",\n  \"tokens\": " << r.tokens
    << ",\n  \"final_context\": " << r.final_context
    << ",\n  \"requested_context\": " << r.requested_context
    << ",\n  \"short_requests\": " << r.short_requests
    << ",\n  \"blocks_reused\": " << r.blocks_reused << ",\n  \"rings_reused\": " << r.rings_reused
    << ",\n  \"summaries_compared\": " << r.cache.summaries
    << ",\n  \"summary_mismatches\": " << r.cache.summary_mismatches
    << ",\n  \"kv_rows_compared\": " << r.cache.kv_rows
    << ",\n  \"kv_mismatches\": " << r.cache.kv_mismatches
    << ",\n  \"first_cache_mismatch\": " << quoted(r.cache.first_mismatch)
    << ",\n  \"steps_checked\": " << r.steps_checked << ",\n  \"rows_checked\": " << r.rows_checked
    << ",\n  \"check_failures\": " << r.check_failures
    << ",\n  \"selection_differs\": " << r.selection_differs
    << ",\n  \"worst_rel_l2\": " << num(r.worst_rel_l2)
    << ",\n  \"worst_max_abs\": " << num(r.worst_max_abs)
    << ",\n  \"first_check_failure\": " << quoted(r.first_check_failure)
    << ",\n  \"repeats\": " << r.repeats << ",\n  \"repeat_mismatches\": " << r.repeat_mismatches
    << ",\n  \"status_reads\": " << r.status_reads << ",\n  \"status_faults\": " << r.status_faults
    << ",\n  \"first_fault\": " << quoted(r.first_fault)
    << ",\n  \"corruption_injected\": " << (r.corruption_injected ? "true" : "false")
    << ",\n  \"wall_seconds\": " << num(r.wall_seconds)
    << ",\n  \"device_seconds\": " << num(r.device_seconds)
    << ",\n  \"reference_write_seconds\": " << num(r.reference_write_seconds)
    << ",\n  \"reference_check_seconds\": " << num(r.reference_check_seconds)
    << ",\n  \"slowest_check_seconds\": " << num(r.slowest_check_seconds)
    << ",\n  \"compare_seconds\": " << num(r.compare_seconds) << "\n}\n";
}

}  // namespace step5::tool::soak
