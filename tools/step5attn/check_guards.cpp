// Device-guard cases of `step5attn check`. A decode step is planned from
// valid host copies, then its device block table, seq_lens or slot_mapping
// is corrupted, as a CUDA-graph replay may see them (the host never reads
// them again). The forward must stay in bounds (compute-sanitizer runs
// these cases under check --tiny), record the fault in the workspace's
// DeviceStatus, give the corrupted request's row NaN output and leave every
// other request's row finite.
#if defined(STEP5_HAVE_CUDA)
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>

#include "step5/numerics.h"
#include "step5/testing/step_buffers.h"
#include "step5/testing/step_tensors.h"
#include "step5attn/check.h"
#include "step5attn/cuda_check.h"

namespace step5::tool::check {

namespace {

constexpr Device kGpu = Device::cuda;

enum class Corrupt { block_id, seq_len_past_table, negative_seq_len, slot };

const char* corrupt_name(Corrupt k) {
  switch (k) {
    case Corrupt::block_id: return "block id >= num_blocks";
    case Corrupt::seq_len_past_table: return "seq_len past the block table";
    case Corrupt::negative_seq_len: return "negative seq_len";
    case Corrupt::slot: return "slot >= num_blocks * B";
  }
  return "?";
}

// Faults the forward may record first (kernels run cache update, indexer,
// select, attention in order).
bool expected_fault(Corrupt k, DeviceFault f) {
  switch (k) {
    case Corrupt::block_id: return f == DeviceFault::kv_block || f == DeviceFault::summary_block;
    case Corrupt::seq_len_past_table:
      return f == DeviceFault::past_block_table || f == DeviceFault::beyond_plan;
    case Corrupt::negative_seq_len: return f == DeviceFault::bad_position;
    case Corrupt::slot: return f == DeviceFault::kv_slot;
  }
  return false;
}

// One decode step of R = 4 requests with request `victim`'s device inputs
// corrupted as `k` says; empty when everything above holds.
std::string run_guard_case(Backend& cuda, const LayerConfig& c, Corrupt k) {
  const bool is_csa = c.kind == LayerKind::csa;
  const std::vector<int32_t> contexts{700, 300, 1500, 64};
  const int32_t R = 4, victim = 1, capacity = 2048;
  const int64_t padding = 2;
  const int32_t per_request = (capacity + c.block_size - 1) / c.block_size;
  const int64_t num_blocks = int64_t{R} * per_request;

  // Reversed block ids so paging is exercised; one decode row per request.
  sim::StepHost h;
  h.max_blocks = per_request;
  h.query_start_loc.push_back(0);
  for (int32_t r = 0; r < R; ++r) {
    const int32_t len = contexts[static_cast<size_t>(r)] + 1;
    h.query_start_loc.push_back(r + 1);
    h.seq_lens.push_back(len);
    h.ring_index.push_back(r);
    for (int32_t b = 0; b < per_request; ++b) {
      h.block_table.push_back(static_cast<int32_t>(num_blocks - 1 - (r * per_request + b)));
    }
    const int32_t p = len - 1;
    h.slot_mapping.push_back(
        int64_t{h.block_table[static_cast<size_t>(r * per_request + p / c.block_size)]} *
            c.block_size +
        p % c.block_size);
  }
  sim::StepBuffers step(kGpu, h, R + padding);
  PlanOptions options;
  options.max_context = capacity;
  const StepPlan plan = cuda.plan(step.desc, {c}, options);

  // Finite cache and ring contents (bf16 0x3c3c ~ 0.0115, e4m3 0x3c = 1.5).
  const auto block_stride = static_cast<int64_t>(cache_bytes_per_block(c));
  sim::DeviceBuffer cache(kGpu, static_cast<size_t>(block_stride * num_blocks));
  sim::DeviceBuffer ring(kGpu, is_csa ? ring_entry_bytes(c) * static_cast<size_t>(R) : 0);
  cache.fill(0x3c);
  ring.fill(0x3c);
  const LayerCache views =
      packed_layer_cache(c, cache.data(), num_blocks, block_stride, ring.data(), R, kGpu);

  std::mt19937_64 rng(11);
  std::vector<int32_t> requests{0, 1, 2, 3}, lens = contexts;
  const sim::StepInput in =
      sim::random_step(c, rng, requests, lens, std::vector<int32_t>(4, 1), true);
  const int64_t n = R, H = c.num_heads, D = c.head_size;
  const auto un = static_cast<size_t>(n);
  const sim::StepTensors dev(kGpu, c, in);
  const size_t row_elems = static_cast<size_t>(H * D);
  sim::DeviceBuffer output(kGpu, (un + padding) * row_elems * 2);
  output.fill(0xff);
  LayerOutputs outs;
  outs.output = TensorView::contiguous(output.data(), DType::bf16, {n + padding, H, D}, kGpu);
  sim::DeviceBuffer workspace(kGpu, plan.workspace_bytes());
  const Workspace ws{workspace.data(), plan.workspace_bytes()};

  // The corruption, on the device copies only.
  const auto vr = static_cast<size_t>(victim);
  switch (k) {
    case Corrupt::block_id: {
      std::vector<int32_t> table = h.block_table;
      const int32_t p = h.seq_lens[vr] - 1;
      table[vr * static_cast<size_t>(per_request) + static_cast<size_t>(p / c.block_size)] =
          static_cast<int32_t>(num_blocks + 7);
      step.block_table.upload(table.data(), table.size() * 4);
      break;
    }
    case Corrupt::seq_len_past_table:
    case Corrupt::negative_seq_len: {
      std::vector<int32_t> seq = h.seq_lens;
      seq[vr] = k == Corrupt::negative_seq_len ? -5 : per_request * c.block_size + 100;
      step.seq_lens.upload(seq.data(), seq.size() * 4);
      break;
    }
    case Corrupt::slot: {
      std::vector<int64_t> slots = h.slot_mapping;
      slots[vr] = num_blocks * c.block_size + 3;
      step.slot_mapping.upload(slots.data(), slots.size() * 8);
      break;
    }
  }

  cuda.prepare_step(plan, ws, nullptr);
  if (is_csa) {
    cuda.forward_csa(c, step.desc, plan, dev.csa(), views, outs, ws, nullptr);
  } else {
    cuda.forward_swa(c, step.desc, plan, dev.swa(), views.kv, outs, ws, nullptr);
  }
  cuda_ok(cudaDeviceSynchronize(), "guard case forward");

  DeviceStatus status;
  cuda_ok(cudaMemcpy(&status, static_cast<char*>(workspace.data()) + plan.workspace.status_offset,
                     sizeof status, cudaMemcpyDeviceToHost),
          "status read");
  const auto fault = static_cast<DeviceFault>(status.fault);
  if (status.count == 0 || !expected_fault(k, fault)) {
    return std::string("status: expected a fault of this corruption, got ") +
           device_fault_name(fault) + " (count " + std::to_string(status.count) + ")";
  }
  const std::vector<uint16_t> out = output.to_vector<uint16_t>((un + padding) * row_elems);
  for (size_t r = 0; r < un + padding; ++r) {
    const bool want_nan = r == vr && k != Corrupt::slot;
    for (size_t e = 0; e < row_elems; ++e) {
      const float x = bf16_to_float(out[r * row_elems + e]);
      const bool ok = r >= un ? x == 0.0f : want_nan ? std::isnan(x) : std::isfinite(x);
      if (!ok) {
        return "row " + std::to_string(r) + " element " + std::to_string(e) + ": expected " +
               (r >= un    ? "0 (padding)"
                : want_nan ? "NaN"
                           : "a finite value") +
               ", got " + std::to_string(x);
      }
    }
  }
  return "";
}

}  // namespace

void run_guard_cases(Backend& cuda, Tally& tally) {
  LayerConfig csa;
  csa.topk = 64;
  LayerConfig swa;
  swa.kind = LayerKind::swa;
  swa.window = 512;
  swa.kv_dtype = DType::fp8_e4m3;
  for (const LayerConfig* c : {&csa, &swa}) {
    for (Corrupt k : {Corrupt::block_id, Corrupt::seq_len_past_table, Corrupt::negative_seq_len,
                      Corrupt::slot}) {
      const std::string name = std::string("device guard ") +
                               (c->kind == LayerKind::csa ? "csa" : "swa") + ": " + corrupt_name(k);
      try {
        const std::string why = run_guard_case(cuda, *c, k);
        if (why.empty()) {
          tally.pass();
        } else {
          tally.fail(name, why);
        }
      } catch (const std::exception& e) {
        tally.fail(name, std::string("threw: ") + e.what());
      }
    }
  }
}

}  // namespace step5::tool::check
#endif
