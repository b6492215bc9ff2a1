// `step5attn bench`: checks the cuda attention against the cpu backend, then
// times the attention operation and the whole layer step on the SPEC 9
// reference workloads. Every timing is the median of several runs, each
// after a 256 MB device write that evicts the 50 MB L2, measured with CUDA
// events around the operation alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/sim.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"

#ifdef STEP5_HAVE_CUDA
#include "cuda/attention/fill.h"
#include "cuda/common/check.h"
#include "step5/testing/device_memory.h"
#include "step5attn/bench_check.h"
#include "step5attn/bench_workload.h"
#endif

namespace step5::tool {

#ifndef STEP5_HAVE_CUDA
int run_bench(int /*argc*/, char** /*argv*/) {
  print_error("bench",
              "needs the cuda backend; this build has none (configure with STEP5_CUDA=ON)");
  return kExitFailure;
}
#else
namespace {

using bench::Counts;
using bench::Shape;

// Ceilings measured on this H200 (SPEC 9) and peers, for context only.
constexpr double kPeakBytes = 4.27e12;  // device copy, bytes read + written per second
constexpr double kPeakFlops = 686e12;   // 8192^3 bf16 matrix product
constexpr const char* kPeers =
    "peers: decode FA2 2.3-4.0 TB/s, cuDNN 2.8-2.95 TB/s; prefill FA2 315-321 TFLOP/s, "
    "cuDNN 583-615 TFLOP/s";

LayerConfig reference_config(const Shape& s) {
  LayerConfig c;  // H=64, G=8, D=192, B=64, I=4, Di=256, K=512, W=512
  c.kind = s.kind;
  c.kv_dtype = s.kv;
  c.spec_tokens = s.query_len > 1 && s.query_len <= 4 ? s.query_len - 1 : 0;
  return c;
}

class Timer {
 public:
  Timer() : flush_(Device::cuda, size_t{256} << 20) {
    STEP5_CUDA_CHECK(cudaEventCreate(&start_));
    STEP5_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Two warm-up runs, then the median of `reps` L2-cold runs, in ms.
  template <class F>
  double median_ms(F&& op, int reps) {
    std::vector<float> times;
    for (int i = -2; i < reps; ++i) {
      STEP5_CUDA_CHECK(cudaMemsetAsync(flush_.data(), i & 0xff, flush_.bytes(), nullptr));
      STEP5_CUDA_CHECK(cudaEventRecord(start_, nullptr));
      op();
      STEP5_CUDA_CHECK(cudaEventRecord(stop_, nullptr));
      STEP5_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      STEP5_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      if (i >= 0) times.push_back(ms);
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
  }

 private:
  sim::DeviceBuffer flush_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

struct Result {
  Shape shape;
  std::string op;  // "attention" or "layer"
  int64_t rows = 0;
  double ms = 0;
  Counts counts;
  double jaccard = -1;
};

template <class T>
sim::DeviceBuffer put(const std::vector<T>& host) {
  return sim::DeviceBuffer::from(Device::cuda, host);
}
TensorView dev_view(const sim::DeviceBuffer& b, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(b.data(), dtype, shape, Device::cuda);
}

std::string label(const Result& r) {
  std::ostringstream s;
  s << (r.shape.kind == LayerKind::csa ? "csa" : "swa") << " " << r.op << " "
    << dtype_name(r.shape.kv) << " " << r.shape.phase() << " ctx " << r.shape.context / 1024
    << "K b" << r.shape.batch << " q" << r.shape.query_len
    << (r.shape.correlated ? " corr" : " indep");
  return s.str();
}

void print_row(const Result& r) {
  const double s = r.ms * 1e-3;
  const double tbs = r.counts.bytes / s / 1e12, tfl = r.counts.flops / s / 1e12;
  std::printf("  %-52s rows %5lld  %9.3f ms  %6.2f TB/s (%5.1f%%)  %7.1f TFLOP/s (%5.1f%%)",
              label(r).c_str(), static_cast<long long>(r.rows), r.ms, tbs,
              100 * r.counts.bytes / s / kPeakBytes, tfl, 100 * r.counts.flops / s / kPeakFlops);
  if (r.jaccard >= 0) std::printf("  jaccard %.3f", r.jaccard);
  std::printf("\n");
  std::fflush(stdout);
}

class Bench {
 public:
  Bench(Backend& gpu, size_t pool_bytes, int reps)
      : gpu_(gpu), pool_(Device::cuda, pool_bytes), reps_(reps) {
    cuda::fill_cache_random(pool_.data(), pool_.bytes(), 5, nullptr);
  }
  void run(const Shape& shape);
  const std::vector<Result>& results() const { return results_; }

 private:
  Backend& gpu_;
  sim::DeviceBuffer pool_;
  int reps_;
  Timer timer_;
  std::mt19937_64 rng_{9};
  std::vector<Result> results_;
};

void Bench::run(const Shape& sh) {
  const LayerConfig c = reference_config(sh);
  const bool csa = c.kind == LayerKind::csa;
  const auto block_bytes = static_cast<int64_t>(cache_bytes_per_block(c));
  const int64_t pool_blocks = static_cast<int64_t>(pool_.bytes()) / block_bytes;
  const std::vector<int32_t> seq(static_cast<size_t>(sh.batch), static_cast<int32_t>(sh.context));
  const std::vector<int32_t> qlen(static_cast<size_t>(sh.batch), sh.query_len);
  const bench::StepHost h = bench::make_step(c, seq, qlen, pool_blocks, rng_);
  std::vector<int32_t> requests(static_cast<size_t>(sh.batch));
  std::iota(requests.begin(), requests.end(), 0);
  const std::vector<int32_t> start(requests.size(),
                                   static_cast<int32_t>(sh.context) - sh.query_len);
  const sim::StepInput in = sim::random_step(c, rng_, requests, start, qlen, true, sh.correlated);

  const int64_t n = h.num_tokens, H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const int64_t R = h.num_requests;
  auto qsl = put(h.query_start_loc), seql = put(h.seq_lens), table = put(h.block_table);
  auto slots = put(h.slot_mapping), ring_ids = put(h.ring_index);
  auto query = put(in.query), gate = put(in.gate), key = put(in.key), value = put(in.value);
  sim::DeviceBuffer output(Device::cuda, static_cast<size_t>(n * H * D) * 2);
  StepDesc step;
  step.num_tokens = n;
  step.num_requests = h.num_requests;
  step.query_start_loc = dev_view(qsl, DType::i32, {R + 1});
  step.seq_lens = dev_view(seql, DType::i32, {R});
  step.block_table = dev_view(table, DType::i32, {R, h.max_blocks});
  step.slot_mapping = dev_view(slots, DType::i64, {n});
  step.ring_index = dev_view(ring_ids, DType::i32, {R});
  step.host_query_start_loc = h.query_start_loc.data();
  step.host_seq_lens = h.seq_lens.data();
  step.host_block_table = h.block_table.data();
  step.host_slot_mapping = h.slot_mapping.data();
  step.host_ring_index = h.ring_index.data();
  const StepPlan plan = gpu_.plan(step, {c});

  sim::DeviceBuffer ring(Device::cuda, static_cast<size_t>(R) * ring_entry_bytes(c));
  ring.fill(0);
  const LayerCache cache =
      packed_layer_cache(c, pool_.data(), pool_blocks, block_bytes, ring.data(), R, Device::cuda);
  const TensorView q = dev_view(query, DType::bf16, {n, H, D});
  const TensorView g = dev_view(gate, DType::bf16, {n, H});
  const TensorView out = dev_view(output, DType::bf16, {n, H, D});

  // The attention operation alone, on host-drawn selections.
  Result op{sh, "attention", n, 0, {}, -1};
  if (csa) {
    const std::vector<int32_t> sel = bench::make_selection(c, h, sh.correlated, rng_);
    auto sel_dev = put(sel);
    const TensorView sv = dev_view(sel_dev, DType::i32, {n, G, c.topk});
    op.jaccard = bench::neighbour_jaccard(c, h, sel);
    op.counts = bench::attention_counts(c, h, &sel);
    op.ms = timer_.median_ms(
        [&] {
          gpu_.sparse_attention(c, step, plan, RowRange{0, n}, q, sv, g, cache.kv, out, nullptr);
        },
        reps_);
  } else {
    op.counts = bench::attention_counts(c, h, nullptr);
    op.ms = timer_.median_ms(
        [&] { gpu_.window_attention(c, step, plan, q, g, cache.kv, out, nullptr); }, reps_);
  }
  results_.push_back(op);
  print_row(op);

  // The whole layer step (KV write, summaries, scores, selection, attention).
  sim::DeviceBuffer ws(Device::cuda, std::max<size_t>(plan.workspace_bytes(), 256));
  const Workspace w{ws.data(), ws.bytes()};
  gpu_.prepare_step(plan, w, nullptr);
  const TensorView kt = dev_view(key, DType::bf16, {n, G, D});
  const TensorView vt = dev_view(value, DType::bf16, {n, G, D});
  Result layer{sh, "layer", n, 0, {}, -1};
  if (csa) {
    auto iq = put(in.index_query), iw = put(in.index_weight), ik = put(in.index_key);
    auto iz = put(in.index_z);
    sim::DeviceBuffer sel_out(Device::cuda, static_cast<size_t>(n * G * c.topk) * 4);
    const CsaInputs ci{q,
                       kt,
                       vt,
                       dev_view(iq, DType::bf16, {n, G, c.index_heads, c.index_dim}),
                       dev_view(iw, DType::f32, {n, G, c.index_heads}),
                       dev_view(ik, DType::bf16, {n, c.index_dim}),
                       dev_view(iz, DType::f32, {n}),
                       g};
    const LayerOutputs lo{out, dev_view(sel_out, DType::i32, {n, G, c.topk})};
    auto fwd = [&] { gpu_.forward_csa(c, step, plan, ci, cache, lo, w, nullptr); };
    fwd();
    sim::synchronize(Device::cuda);
    const auto sel = sel_out.to_vector<int32_t>(static_cast<size_t>(n * G * c.topk));
    layer.jaccard = bench::neighbour_jaccard(c, h, sel);
    layer.counts = bench::attention_counts(c, h, &sel);
    const Counts extra = bench::csa_layer_extra(c, h);
    layer.counts.bytes += extra.bytes;
    layer.counts.flops += extra.flops;
    layer.ms = timer_.median_ms(fwd, reps_);
  } else {
    const SwaInputs si{q, kt, vt, g};
    const LayerOutputs lo{out, TensorView{}};
    layer.counts = bench::attention_counts(c, h, nullptr);
    layer.counts.bytes += static_cast<double>(n * G * 2 * D) * dtype_size(c.kv_dtype);
    layer.ms = timer_.median_ms(
        [&] { gpu_.forward_swa(c, step, plan, si, cache.kv, lo, w, nullptr); }, reps_);
  }
  results_.push_back(layer);
  print_row(layer);
}

std::vector<Shape> shapes(bool quick) {
  std::vector<Shape> out;
  const DType bf16 = DType::bf16, fp8 = DType::fp8_e4m3;
  const LayerKind csa = LayerKind::csa, swa = LayerKind::swa;
  if (quick) {
    out = {{csa, bf16, 8192, 1, 1, false},    {csa, bf16, 131072, 1, 1, false},
           {csa, bf16, 131072, 32, 1, false}, {csa, bf16, 131072, 32, 4, false},
           {csa, bf16, 131072, 32, 4, true},  {csa, fp8, 131072, 32, 4, false},
           {swa, bf16, 32768, 32, 1, false},  {swa, bf16, 32768, 32, 4, false},
           {csa, bf16, 8192, 1, 2048, false}, {swa, bf16, 8192, 1, 2048, false}};
    return out;
  }
  // Prefill, then the longest contexts and the batch extremes, so a
  // --max-seconds cut drops the least telling shapes.
  for (DType kv : {bf16, fp8}) {
    for (int64_t ctx : {8192, 32768}) {
      out.push_back({csa, kv, ctx, 1, 2048, false});
      out.push_back({swa, kv, ctx, 1, 2048, false});
    }
  }
  for (int64_t ctx : {1048576, 131072, 8192, 32768}) {
    for (int batch : {1, 32, 128, 8}) {
      for (DType kv : {bf16, fp8}) {
        out.push_back({csa, kv, ctx, batch, 1, false});
        out.push_back({csa, kv, ctx, batch, 4, false});
        out.push_back({csa, kv, ctx, batch, 4, true});
        out.push_back({swa, kv, ctx, batch, 1, false});
        out.push_back({swa, kv, ctx, batch, 4, false});
      }
    }
  }
  return out;
}

void write_json(const std::string& path, const std::string& gpu_name, const std::string& checks,
                const std::vector<Result>& results, int skipped) {
  std::ofstream f(path);
  f << "{\n  \"date\": \"2026-12-02\",\n  \"gpu\": \"" << gpu_name << "\",\n"
    << "  \"ceilings\": {\"bytes_per_s\": " << kPeakBytes << ", \"flops\": " << kPeakFlops
    << "},\n  \"peers\": \"" << kPeers << "\",\n  \"checks\": [\n    " << checks
    << "\n  ],\n  \"skipped_shapes\": " << skipped << ",\n  \"results\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double s = r.ms * 1e-3;
    f << "    {\"op\": \"" << r.op << "\", \"layer\": \""
      << (r.shape.kind == LayerKind::csa ? "csa" : "swa") << "\", \"kv\": \""
      << dtype_name(r.shape.kv) << "\", \"phase\": \"" << r.shape.phase()
      << "\", \"context\": " << r.shape.context << ", \"batch\": " << r.shape.batch
      << ", \"query_len\": " << r.shape.query_len << ", \"regime\": \""
      << (r.shape.correlated ? "correlated" : "independent") << "\", \"rows\": " << r.rows
      << ", \"ms\": " << r.ms << ", \"bytes\": " << r.counts.bytes
      << ", \"flops\": " << r.counts.flops << ", \"tb_per_s\": " << r.counts.bytes / s / 1e12
      << ", \"tflop_per_s\": " << r.counts.flops / s / 1e12
      << ", \"frac_bw\": " << r.counts.bytes / s / kPeakBytes
      << ", \"frac_flops\": " << r.counts.flops / s / kPeakFlops << ", \"jaccard\": " << r.jaccard
      << "}" << (i + 1 < results.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

}  // namespace

int run_bench(int argc, char** argv) {
  std::string json_path, max_seconds_text;
  bool quick = false, check_only = false;
  std::vector<std::string> positional;
  std::string error;
  if (!parse_args(argc, argv,
                  {{"quick", nullptr, &quick},
                   {"check-only", nullptr, &check_only},
                   {"json", &json_path, nullptr},
                   {"max-seconds", &max_seconds_text, nullptr}},
                  positional, error) ||
      !positional.empty()) {
    print_error("bench", error.empty() ? "takes no positional arguments" : error);
    return kExitUsage;
  }
  int64_t max_seconds = 0;
  if (!max_seconds_text.empty() && !parse_int(max_seconds_text, 1, 86400, max_seconds)) {
    print_error("bench", "--max-seconds expected an integer in [1, 86400]");
    return kExitUsage;
  }
  try {
    auto cpu = make_backend(BackendKind::cpu);
    auto gpu = make_backend(BackendKind::cuda);
    cudaDeviceProp prop{};
    STEP5_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::cout << "step5attn bench on " << prop.name << " (" << prop.multiProcessorCount
              << " SMs)\nphase 1: cuda attention vs cpu backend\n";
    std::string checks;
    const bool ok = bench::run_attention_checks(*cpu, *gpu, std::cout, checks);
    if (!ok || check_only) {
      if (!json_path.empty()) write_json(json_path, prop.name, checks, {}, 0);
      if (!ok) print_error("bench", "attention check failed; not timing");
      return ok ? kExitOk : kExitFailure;
    }
    std::cout << "phase 2: timings (median of " << (quick ? 5 : 7)
              << " L2-cold runs; % of 4.27 TB/s and 686 TFLOP/s)\n  " << kPeers << "\n";
    size_t free_bytes = 0, total_bytes = 0;
    STEP5_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t pool = std::min(quick ? size_t{8} << 30 : size_t{48} << 30,
                                 free_bytes - std::min(free_bytes, size_t{16} << 30));
    Bench bench(*gpu, pool, quick ? 5 : 7);
    const auto t0 = std::chrono::steady_clock::now();
    int skipped = 0;
    for (const Shape& s : shapes(quick)) {
      const auto spent = std::chrono::steady_clock::now() - t0;
      if (max_seconds > 0 && spent > std::chrono::seconds(max_seconds)) {
        ++skipped;
        continue;
      }
      bench.run(s);
    }
    if (skipped > 0) std::cout << "  (" << skipped << " shapes skipped: --max-seconds)\n";
    if (!json_path.empty()) write_json(json_path, prop.name, checks, bench.results(), skipped);
    return kExitOk;
  } catch (const Error& e) {
    print_error("bench", std::string(error_code_name(e.code())) + ": " + e.what());
    return kExitFailure;
  }
}
#endif

}  // namespace step5::tool
