// Host time of planning one step (Backend::plan, the cpu backend) for the
// bench's decode, verify and prefill shapes, with one CSA and one SWA
// layer: what an engine pays once per step before its forwards. The plan
// reads every block id the step's requests use once (2M entries at 1M
// tokens x 128 requests), so it grows with batch x context; the cuda
// backend's plan adds only its per-layer schedule to this. Not part of the
// build; on Debian, after building the library (build-dev here):
//
//   g++ -O2 -std=c++17 -Iinclude -Itools -o /tmp/plan_time bench/plan_time.cpp
//       tools/step5attn/bench_workload.cpp build-dev/libstep5_testing.a
//       build-dev/libstep5.a -L/usr/local/cuda/lib64 -lcudart -lpthread
//   /tmp/plan_time
//
// (-lcudart only when the library was built with CUDA.) Prints the fastest
// of five plans per shape.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/step_buffers.h"
#include "step5attn/bench_workload.h"

using namespace step5;

namespace {

struct Shape {
  int64_t context;
  int batch;
  int query_len;
};

double plan_us(Backend& backend, const LayerConfig& csa, const Shape& s) {
  std::mt19937_64 rng(1);
  const std::vector<int32_t> seq(static_cast<size_t>(s.batch), static_cast<int32_t>(s.context));
  const std::vector<int32_t> query(static_cast<size_t>(s.batch), s.query_len);
  tool::bench::StepHost h = tool::bench::make_step(csa, seq, query, int64_t{1} << 22, rng);
  sim::StepHost host;
  host.query_start_loc = std::move(h.query_start_loc);
  host.seq_lens = std::move(h.seq_lens);
  host.block_table = std::move(h.block_table);
  host.slot_mapping = std::move(h.slot_mapping);
  host.ring_index = std::move(h.ring_index);
  host.max_blocks = h.max_blocks;
  const sim::StepBuffers step(Device::host, std::move(host), h.num_tokens);
  LayerConfig swa = csa;
  swa.kind = LayerKind::swa;
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepPlan plan = backend.plan(step.desc, {csa, swa}, PlanOptions{});
    const auto t1 = std::chrono::steady_clock::now();
    if (plan.num_tokens != h.num_tokens) std::printf("unexpected plan\n");
    best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  const auto backend = make_backend(BackendKind::cpu);
  const LayerConfig csa;  // the SPEC reference shapes
  const Shape shapes[] = {{8192, 32, 1},     {131072, 32, 1},  {131072, 32, 4},
                          {131072, 128, 1},  {1048576, 32, 1}, {1048576, 128, 1},
                          {1048576, 128, 4}, {32768, 1, 2048}, {131072, 1, 8192}};
  for (const Shape& s : shapes) {
    std::printf("context %8lld, %3d requests x %4d rows: plan %8.1f us\n",
                static_cast<long long>(s.context), s.batch, s.query_len, plan_us(*backend, csa, s));
  }
  return 0;
}
