#include "step5attn/bench_result.h"

#include "step5/testing/json.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace step5::tool::bench {

namespace {

// Strings escaped, non-finite numbers written as null (JSON has no NaN).
std::string quoted(const std::string& s) {
  return json::quote(s);
}

std::string num(double x) {
  return json::number(x);
}

}  // namespace

std::string label(const Result& r) {
  std::ostringstream s;
  s << r.layer << " " << r.op << " " << r.kv << " " << r.phase << " ctx " << r.context / 1024
    << "K b" << r.batch << " q" << r.query_len << (r.regime == "correlated" ? " corr" : " indep");
  return s.str();
}

void print_row(const Result& r, const MeasuredCopy& copy) {
  const double s = r.ms * 1e-3;
  std::printf("  %-58s %9.3f ms  %6.2f TB/s (%5.1f%%)  %6.1f TFLOP/s", label(r).c_str(), r.ms,
              r.bytes / s / 1e12, 100 * r.bytes / s / kPeakBytes, r.flops / s / 1e12);
  if (r.floor_bytes > 0) {
    std::printf("  floor %.3f ms (%.0f%%", r.floor_bytes / kPeakBytes * 1e3,
                100 * r.floor_bytes / s / kPeakBytes);
    if (std::isfinite(copy.bytes_per_s)) {
      std::printf("; %.0f%% of measured copy", 100 * r.floor_bytes / s / copy.bytes_per_s);
    }
    std::printf(")");
  }
  if (r.jaccard >= 0) std::printf("  jaccard %.3f", r.jaccard);
  if (r.union_ratio >= 0) std::printf("  union %.2f", r.union_ratio);
  if (r.host_us >= 0) std::printf("  host %.1f us/forward", r.host_us);
  std::printf("\n");
  std::fflush(stdout);
}

void write_json(const std::string& path, const std::string& gpu_name, const std::string& date,
                const std::string& checks, const std::vector<Result>& results, int skipped,
                const MeasuredCopy& copy) {
  std::ofstream f(path);
  f << "{\n  \"date\": " << quoted(date) << ",\n  \"gpu\": " << quoted(gpu_name) << ",\n"
    << "  \"ceilings\": {\"bytes_per_s\": " << num(kPeakBytes) << ", \"flops\": " << num(kPeakFlops)
    << "},\n  \"measured_copy\": {\"bytes_per_s\": " << num(copy.bytes_per_s)
    << ", \"buffer_bytes\": " << copy.buffer_bytes << "},\n  \"checks\": [\n    " << checks
    << "\n  ],\n  \"skipped_shapes\": " << skipped << ",\n  \"results\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double s = r.ms * 1e-3;
    f << "    {\"op\": " << quoted(r.op) << ", \"layer\": " << quoted(r.layer)
      << ", \"kv\": " << quoted(r.kv) << ", \"phase\": " << quoted(r.phase)
      << ", \"context\": " << r.context << ", \"batch\": " << r.batch
      << ", \"query_len\": " << r.query_len << ", \"regime\": " << quoted(r.regime)
      << ", \"rows\": " << r.rows << ", \"ms\": " << num(r.ms) << ", \"bytes\": " << num(r.bytes)
      << ", \"flops\": " << num(r.flops) << ", \"tb_per_s\": " << num(r.bytes / s / 1e12)
      << ", \"tflop_per_s\": " << num(r.flops / s / 1e12)
      << ", \"frac_bw\": " << num(r.bytes / s / kPeakBytes)
      << ", \"frac_flops\": " << num(r.flops / s / kPeakFlops)
      << ", \"jaccard\": " << num(r.jaccard) << ", \"union_ratio\": " << num(r.union_ratio)
      << ", \"floor_bytes\": " << num(r.floor_bytes)
      << ", \"floor_ms\": " << num(r.floor_bytes / kPeakBytes * 1e3)
      << ", \"floor_over_time\": " << num(r.floor_bytes / s / kPeakBytes)
      << ", \"host_us_per_forward\": " << num(r.host_us)
      << ", \"frac_measured_copy\": " << num(r.bytes / s / copy.bytes_per_s)
      << ", \"floor_over_time_measured\": " << num(r.floor_bytes / s / copy.bytes_per_s) << "}"
      << (i + 1 < results.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

}  // namespace step5::tool::bench
