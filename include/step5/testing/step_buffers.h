// Per-step device copies of the simulator's host metadata and inputs.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "step5/error.h"
#include "step5/step.h"
#include "step5/testing/device_memory.h"

namespace step5::sim {

// Host metadata of one step, in the layout StepDesc expects.
struct StepHost {
  std::vector<int32_t> query_start_loc;  // [Rs+1]
  std::vector<int32_t> seq_lens;         // [Rs]
  std::vector<int32_t> block_table;      // [Rs, max_blocks]
  std::vector<int64_t> slot_mapping;     // [n]
  std::vector<int32_t> ring_index;       // [Rs]
  int32_t max_blocks = 0;
};

// The metadata on the device plus a StepDesc over it whose host_* pointers
// name the host copies, as an engine would hand them to the planner.
struct StepBuffers {
  StepHost host;
  DeviceBuffer query_start_loc, seq_lens, block_table, slot_mapping, ring_index;
  StepDesc desc;

  StepBuffers(Device device, StepHost h, int64_t output_rows) : host(std::move(h)) {
    query_start_loc = DeviceBuffer::from(device, host.query_start_loc);
    seq_lens = DeviceBuffer::from(device, host.seq_lens);
    block_table = DeviceBuffer::from(device, host.block_table);
    slot_mapping = DeviceBuffer::from(device, host.slot_mapping);
    ring_index = DeviceBuffer::from(device, host.ring_index);
    const auto rs = static_cast<int64_t>(host.seq_lens.size());
    const auto n = static_cast<int64_t>(host.slot_mapping.size());
    desc.num_tokens = n;
    desc.num_output_rows = output_rows;
    desc.num_requests = static_cast<int32_t>(rs);
    desc.query_start_loc =
        TensorView::contiguous(query_start_loc.data(), DType::i32, {rs + 1}, device);
    desc.seq_lens = TensorView::contiguous(seq_lens.data(), DType::i32, {rs}, device);
    desc.block_table =
        TensorView::contiguous(block_table.data(), DType::i32, {rs, host.max_blocks}, device);
    desc.slot_mapping = TensorView::contiguous(slot_mapping.data(), DType::i64, {n}, device);
    desc.ring_index = TensorView::contiguous(ring_index.data(), DType::i32, {rs}, device);
    desc.host_query_start_loc = host.query_start_loc.data();
    desc.host_seq_lens = host.seq_lens.data();
    desc.host_block_table = host.block_table.data();
    desc.host_slot_mapping = host.slot_mapping.data();
    desc.host_ring_index = host.ring_index.data();
  }
};

// One input tensor copied to the device. An optional input given as an
// empty array stays absent (null view).
struct InputTensor {
  DeviceBuffer buffer;
  TensorView view;

  template <class T>
  InputTensor(Device device, const char* what, const T* data, size_t count, size_t expected,
              std::initializer_list<int64_t> shape, bool optional = false) {
    static_assert(std::is_same_v<T, uint16_t> || std::is_same_v<T, float>);
    if (optional && count == 0) return;
    if (count != expected) {
      throw Error(ErrorCode::invalid_argument, std::string("sim step: ") + what + " expected " +
                                                   std::to_string(expected) + " elements, got " +
                                                   std::to_string(count));
    }
    buffer = DeviceBuffer(device, count * sizeof(T));
    buffer.upload(data, count * sizeof(T));
    view = TensorView::contiguous(
        buffer.data(), std::is_same_v<T, float> ? DType::f32 : DType::bf16, shape, device);
  }
  template <class T>
  InputTensor(Device device, const char* what, const std::vector<T>& data, size_t expected,
              std::initializer_list<int64_t> shape, bool optional = false)
      : InputTensor(device, what, data.data(), data.size(), expected, shape, optional) {}
};

}  // namespace step5::sim
