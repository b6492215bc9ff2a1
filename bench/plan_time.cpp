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
  const tool::bench::StepHost h = tool::bench::make_step(csa, seq, query, int64_t{1} << 22, rng);
  const int64_t R = h.num_requests, n = h.num_tokens;
  StepDesc step;
  step.num_tokens = n;
  step.num_requests = h.num_requests;
  auto view = [](const auto& v, DType dtype, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(const_cast<void*>(static_cast<const void*>(v.data())), dtype,
                                  shape, Device::host);
  };
  step.query_start_loc = view(h.query_start_loc, DType::i32, {R + 1});
  step.seq_lens = view(h.seq_lens, DType::i32, {R});
  step.block_table = view(h.block_table, DType::i32, {R, h.max_blocks});
  step.slot_mapping = view(h.slot_mapping, DType::i64, {n});
  step.ring_index = view(h.ring_index, DType::i32, {R});
  step.host_query_start_loc = h.query_start_loc.data();
  step.host_seq_lens = h.seq_lens.data();
  step.host_block_table = h.block_table.data();
  step.host_slot_mapping = h.slot_mapping.data();
  step.host_ring_index = h.ring_index.data();
  LayerConfig swa = csa;
  swa.kind = LayerKind::swa;
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepPlan plan = backend.plan(step, {csa, swa}, PlanOptions{});
    const auto t1 = std::chrono::steady_clock::now();
    if (plan.num_tokens != n) std::printf("unexpected plan\n");
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
