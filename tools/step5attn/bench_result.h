// One row of `step5attn bench`: what was timed, how long it took, and the
// work it had to do, printed against the ceilings and written as JSON. The
// JSON row fields op, layer, kv, phase, context, batch, query_len, regime,
// ms, bytes and flops are stable; new fields are only added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace step5::tool::bench {

// Ceilings measured on the H200 this project benchmarks on (SPEC 9).
constexpr double kPeakBytes = 4.27e12;  // device copy, bytes read + written per second
constexpr double kPeakFlops = 686e12;   // 8192^3 bf16 matrix product

struct Result {
  std::string op;      // "attention", "layer" or "step" (a graph of several layers)
  std::string layer;   // "csa", "swa" or "csa+swa"
  std::string kv;      // "bf16", "fp8_e4m3" or "bf16+fp8_e4m3"
  std::string phase;   // "decode", "verify" or "prefill"
  std::string regime;  // "independent" or "correlated"
  int64_t context = 0;
  int batch = 0;
  int query_len = 0;
  int64_t rows = 0;
  double ms = 0;
  double bytes = 0;  // what the kernels request (see bench_workload.h)
  double flops = 0;
  double floor_bytes = 0;   // each input read once, each output written once
  double jaccard = -1;      // neighbour overlap of CSA selections; -1 = n/a
  double union_ratio = -1;  // CSA: regions a row tile's union walks per selected one; -1 = n/a
  double host_us = -1;      // host time per forward call (bench_timer.h); -1 = not measured
};

// The device copy bandwidth measured on the GPU of the run
// (bench_ceiling.h): rows are printed and written against it as well as
// against kPeakBytes. NaN bytes_per_s = not measured (rows then say so:
// null in JSON).
struct MeasuredCopy {
  double bytes_per_s = 0;   // bytes read + written per second
  size_t buffer_bytes = 0;  // bytes of each timed copy
};

std::string label(const Result& r);
void print_row(const Result& r, const MeasuredCopy& copy);
// Writes the run as JSON; strings are escaped.
void write_json(const std::string& path, const std::string& gpu_name, const std::string& date,
                const std::string& checks, const std::vector<Result>& results, int skipped,
                const MeasuredCopy& copy);

}  // namespace step5::tool::bench
