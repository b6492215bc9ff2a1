// DLPack arrays (nb::ndarray: numpy, torch, CuPy, JAX, ...) as step5 views,
// without copies. The library checks shapes and strides itself; here the
// array's dtype and device are mapped onto step5's and anything step5 has no
// name for is refused with the argument's name.
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>

#include "step5/attention.h"

namespace step5::python {

namespace nb = nanobind;

// Arrays the library only reads, and arrays it writes.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// Where a backend's arrays must live.
struct Placement {
  Device device = Device::host;
  int device_id = 0;  // cuda only
};

// A view of `array` as `dtype`. bf16 arguments also take uint16 arrays that
// hold bf16 bits (numpy has no bfloat16). Throws step5::Error naming `what`
// when the dtype or device does not match.
TensorView input_view(const InArray& array, const char* what, DType dtype, const Placement& where);
TensorView output_view(const OutArray& array, const char* what, DType dtype,
                       const Placement& where);
// Absent (null) view for None.
TensorView optional_input(const std::optional<InArray>& array, const char* what, DType dtype,
                          const Placement& where);
TensorView optional_output(const std::optional<OutArray>& array, const char* what, DType dtype,
                           const Placement& where);

// A host array the planner reads through a raw pointer: host memory,
// `dtype`, C-contiguous, `count` elements (-1: any). Null for None.
const void* host_copy(const std::optional<InArray>& array, const char* what, DType dtype,
                      int64_t count);

// Byte storage addressed per row: dim 0 indexes rows (cache blocks, ring
// entries); dims 1.. are contiguous and hold `row_bytes` bytes per row; the
// row stride in bytes is free. Any dtype (uint8, bf16, ...) is read as bytes.
struct ByteRows {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t row_stride = 0;  // bytes
  int64_t row_bytes = 0;
};
ByteRows byte_rows(const OutArray& array, const char* what, const Placement& where);

// A 1-D contiguous buffer of any whole-byte dtype, as bytes (workspaces).
struct ByteSpan {
  void* data = nullptr;
  size_t bytes = 0;
};
ByteSpan byte_span(const OutArray& array, const char* what, const Placement& where);

// The layer's cache in the packed per-block layout (step5::packed_layer_cache)
// over `kv_cache` [num_blocks, >= cache_bytes_per_block] and, for CSA,
// `ring` [entries, >= ring_entry_bytes]. Without a ring the ring view is
// empty (operations that need none: KV write, scores, attention).
LayerCache layer_cache(const LayerConfig& config, const OutArray& kv_cache,
                       const std::optional<OutArray>& ring, const Placement& where);

// A CUDA stream handle given as an integer (torch's Stream.cuda_stream).
inline Stream to_stream(uintptr_t handle) {
  return reinterpret_cast<Stream>(handle);
}

}  // namespace step5::python
