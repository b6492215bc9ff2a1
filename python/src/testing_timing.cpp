#include "testing_timing.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include "step5/attention.h"

namespace step5::python {

namespace {

// Zeroed host memory for one tensor, cache or workspace, 256-byte aligned.
struct HostBuffer {
  std::vector<unsigned char> bytes;
  void* data;
  explicit HostBuffer(size_t size) : bytes(size + 256, 0) {
    const auto address = reinterpret_cast<uintptr_t>(bytes.data());
    data = bytes.data() + (256 - address % 256) % 256;
  }
};

}  // namespace

double cpp_decode_forward_seconds(const LayerConfig& c, int64_t context, int64_t iterations,
                                  int num_threads, bool empty) {
  BackendOptions options;
  options.num_threads = num_threads;
  const std::unique_ptr<Backend> backend = make_backend(BackendKind::cpu, options);
  const int64_t blocks = (context + c.block_size - 1) / c.block_size;
  std::vector<int32_t> qsl{0, 1}, lens{static_cast<int32_t>(context)}, rings{0};
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  const int64_t last = context - 1;
  std::vector<int64_t> slots{table[static_cast<size_t>(last / c.block_size)] * c.block_size +
                             last % c.block_size};
  // An empty step has no request and no row: forward only validates.
  const int64_t n = empty ? 0 : 1;
  const int32_t R = empty ? 0 : 1;
  if (empty) qsl.pop_back();
  StepDesc step;
  step.num_tokens = n;
  step.num_requests = R;
  step.query_start_loc = TensorView::contiguous(qsl.data(), DType::i32, {R + 1});
  step.seq_lens = TensorView::contiguous(lens.data(), DType::i32, {R});
  step.block_table = TensorView::contiguous(table.data(), DType::i32, {R, blocks});
  step.slot_mapping = TensorView::contiguous(slots.data(), DType::i64, {n});
  step.ring_index = TensorView::contiguous(rings.data(), DType::i32, {R});

  const int64_t H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const int64_t I = c.index_heads, Di = c.index_dim;
  HostBuffer query(static_cast<size_t>(H * D * 2)), key(static_cast<size_t>(G * D * 2)),
      value(static_cast<size_t>(G * D * 2)), iq(static_cast<size_t>(G * I * Di * 2)),
      iw(static_cast<size_t>(G * I * 4)), ik(static_cast<size_t>(Di * 2)), iz(4),
      out(static_cast<size_t>(H * D * 2));
  CsaInputs in;
  in.query = TensorView::contiguous(query.data, DType::bf16, {n, H, D});
  in.key = TensorView::contiguous(key.data, DType::bf16, {n, G, D});
  in.value = TensorView::contiguous(value.data, DType::bf16, {n, G, D});
  in.index_query = TensorView::contiguous(iq.data, DType::bf16, {n, G, I, Di});
  in.index_weight = TensorView::contiguous(iw.data, DType::f32, {n, G, I});
  in.index_key = TensorView::contiguous(ik.data, DType::bf16, {n, Di});
  in.index_z = TensorView::contiguous(iz.data, DType::f32, {n});
  LayerOutputs outs;
  outs.output = TensorView::contiguous(out.data, DType::bf16, {n, H, D});

  const auto block_bytes = static_cast<int64_t>(cache_bytes_per_block(c));
  HostBuffer cache(static_cast<size_t>(block_bytes * blocks)), ring(ring_entry_bytes(c));
  const LayerCache views =
      packed_layer_cache(c, cache.data, blocks, block_bytes, ring.data, 1, Device::host);
  const StepPlan plan = backend->plan(step, {c});
  HostBuffer workspace(plan.workspace_bytes());
  const Workspace ws{workspace.data, plan.workspace_bytes()};
  backend->prepare_step(plan, ws, nullptr);

  backend->forward_csa(c, step, plan, in, views, outs, ws, nullptr);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    backend->forward_csa(c, step, plan, in, views, outs, ws, nullptr);
  }
  const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
  return spent.count() / static_cast<double>(iterations > 0 ? iterations : 1);
}

}  // namespace step5::python
