#include "arrays.h"

#include <string>

#include "errors.h"

namespace step5::python {

namespace {

using nb::dlpack::dtype_code;

// DLPack device types (dlpack.h DLDeviceType).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

// Stands in for the data pointer of an empty array whose producer gives
// null (torch does), since a null view means "absent" to the library. An
// empty view is never read.
alignas(256) unsigned char empty_array_storage[256];

std::string dtype_text(nb::dlpack::dtype t) {
  std::string base;
  switch (static_cast<dtype_code>(t.code)) {
    case dtype_code::Int: base = "int"; break;
    case dtype_code::UInt: base = "uint"; break;
    case dtype_code::Float: base = "float"; break;
    case dtype_code::Bfloat: base = "bfloat"; break;
    case dtype_code::Complex: base = "complex"; break;
    case dtype_code::Bool: return "bool";
    case dtype_code::Float8_E4M3FN: return "float8_e4m3fn";
    case dtype_code::Float8_E5M2: return "float8_e5m2";
    default: return "dlpack dtype code " + std::to_string(t.code);
  }
  std::string text = base + std::to_string(t.bits);
  if (t.lanes != 1) text += "x" + std::to_string(t.lanes);
  return text;
}

const char* expected_text(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bfloat16 (or uint16 holding bf16 bits)";
    case DType::f32: return "float32";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::fp8_e4m3: return "float8_e4m3fn (or uint8 holding e4m3 bits)";
  }
  return "?";
}

bool is(nb::dlpack::dtype t, dtype_code code, int bits) {
  return t.code == static_cast<uint8_t>(code) && t.bits == bits && t.lanes == 1;
}

bool dtype_matches(nb::dlpack::dtype t, DType dtype) {
  switch (dtype) {
    case DType::bf16: return is(t, dtype_code::Bfloat, 16) || is(t, dtype_code::UInt, 16);
    case DType::f32: return is(t, dtype_code::Float, 32);
    case DType::i32: return is(t, dtype_code::Int, 32);
    case DType::i64: return is(t, dtype_code::Int, 64);
    case DType::fp8_e4m3: return is(t, dtype_code::Float8_E4M3FN, 8) || is(t, dtype_code::UInt, 8);
  }
  return false;
}

std::string device_text(int type, int id) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDAHost: return "cuda pinned host memory";
    case kDLCUDA: return "cuda:" + std::to_string(id);
    case kDLCUDAManaged: return "cuda managed memory";
  }
  return "dlpack device type " + std::to_string(type);
}

std::string placement_text(const Placement& where) {
  return where.device == Device::host ? std::string("cpu")
                                      : "cuda:" + std::to_string(where.device_id);
}

// Host memory (plain or pinned) for the cpu backend; device or managed
// memory of the backend's GPU for the cuda backend.
void check_device(int type, int id, const char* what, const Placement& where) {
  const bool host = type == kDLCPU || type == kDLCUDAHost;
  const bool cuda = type == kDLCUDA || type == kDLCUDAManaged;
  const bool ok = where.device == Device::host ? host : cuda && id == where.device_id;
  if (!ok) {
    fail_argument(std::string(what) + ": expected an array on " + placement_text(where) +
                  " (the backend's device), got " + device_text(type, id));
  }
}

template <class Array>
TensorView make_view(const Array& a, const char* what, DType dtype, const Placement& where) {
  if (!dtype_matches(a.dtype(), dtype)) {
    fail_argument(std::string(what) + ": expected dtype " + expected_text(dtype) + ", got " +
                  dtype_text(a.dtype()));
  }
  check_device(a.device_type(), a.device_id(), what, where);
  const size_t rank = a.ndim();
  if (rank > static_cast<size_t>(kMaxRank)) {
    fail_argument(std::string(what) + ": expected at most " + std::to_string(kMaxRank) +
                  " dimensions, got " + std::to_string(rank));
  }
  TensorView view;
  view.data = const_cast<void*>(static_cast<const void*>(a.data()));
  if (view.data == nullptr && a.size() == 0) view.data = empty_array_storage;
  view.dtype = dtype;
  view.device = where.device;
  view.rank = static_cast<int>(rank);
  // Producers may give any stride for a dimension of extent 0 or 1 (numpy
  // gives 0 for an empty array): such a stride never moves an address, so
  // it is replaced by the dense one the library's layout checks expect.
  const bool empty = a.size() == 0;
  int64_t dense = 1;
  for (size_t i = rank; i-- > 0;) {
    const auto extent = static_cast<int64_t>(a.shape(i));
    view.shape[i] = extent;
    view.stride[i] = empty || extent == 1 ? dense : a.stride(i);
    dense *= extent > 0 ? extent : 1;
  }
  return view;
}

}  // namespace

TensorView input_view(const InArray& array, const char* what, DType dtype, const Placement& where) {
  return make_view(array, what, dtype, where);
}

TensorView output_view(const OutArray& array, const char* what, DType dtype,
                       const Placement& where) {
  return make_view(array, what, dtype, where);
}

TensorView optional_input(const std::optional<InArray>& array, const char* what, DType dtype,
                          const Placement& where) {
  return array ? make_view(*array, what, dtype, where) : TensorView{};
}

TensorView optional_output(const std::optional<OutArray>& array, const char* what, DType dtype,
                           const Placement& where) {
  return array ? make_view(*array, what, dtype, where) : TensorView{};
}

const void* host_copy(const std::optional<InArray>& array, const char* what, DType dtype,
                      int64_t count) {
  if (!array) return nullptr;
  const InArray& a = *array;
  const TensorView view = make_view(a, what, dtype, Placement{Device::host, 0});
  int64_t expected_stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    if (view.shape[static_cast<size_t>(d)] != 1 &&
        view.stride[static_cast<size_t>(d)] != expected_stride) {
      fail_argument(std::string(what) + ": expected a C-contiguous host array, got strides " +
                    "that are not row-major dense");
    }
    expected_stride *= view.shape[static_cast<size_t>(d)];
  }
  if (count >= 0 && view.numel() != count) {
    fail_argument(std::string(what) + ": expected " + std::to_string(count) +
                  " elements (as its device array), got " + std::to_string(view.numel()));
  }
  return view.data;
}

ByteRows byte_rows(const OutArray& array, const char* what, const Placement& where) {
  check_device(array.device_type(), array.device_id(), what, where);
  const auto item = static_cast<int64_t>(array.itemsize());
  const size_t rank = array.ndim();
  if (rank < 2 || array.dtype().lanes != 1 || array.dtype().bits % 8 != 0) {
    fail_argument(std::string(what) + ": expected an array [rows, ...] of whole-byte elements " +
                  "(2 or more dimensions), got " + std::to_string(rank) + " dimensions of " +
                  dtype_text(array.dtype()));
  }
  int64_t inner = 1;
  for (size_t d = rank - 1; d >= 1; --d) {
    if (array.shape(d) != 1 && array.stride(d) != inner) {
      fail_argument(std::string(what) + ": expected dims 1.. contiguous (one row's bytes " +
                    "dense), got stride " + std::to_string(array.stride(d)) + " at dim " +
                    std::to_string(d) + " where " + std::to_string(inner) + " is dense");
    }
    inner *= static_cast<int64_t>(array.shape(d));
  }
  ByteRows rows;
  rows.data = array.data();
  rows.rows = static_cast<int64_t>(array.shape(0));
  rows.row_stride = array.stride(0) * item;
  rows.row_bytes = inner * item;
  return rows;
}

ByteSpan byte_span(const OutArray& array, const char* what, const Placement& where) {
  check_device(array.device_type(), array.device_id(), what, where);
  if (array.ndim() != 1 || array.dtype().lanes != 1 || array.dtype().bits % 8 != 0 ||
      (array.shape(0) > 1 && array.stride(0) != 1)) {
    fail_argument(std::string(what) + ": expected a contiguous 1-D array of whole-byte " +
                  "elements, got " + std::to_string(array.ndim()) + " dimensions of " +
                  dtype_text(array.dtype()));
  }
  return {array.data(), array.nbytes()};
}

LayerCache layer_cache(const LayerConfig& config, const OutArray& kv_cache,
                       const std::optional<OutArray>& ring, const Placement& where) {
  const ByteRows blocks = byte_rows(kv_cache, "kv_cache", where);
  const auto need = static_cast<int64_t>(cache_bytes_per_block(config));
  if (blocks.row_bytes < need) {
    fail_argument("kv_cache: expected >= " + std::to_string(need) +
                  " bytes per block (cache_bytes_per_block), got " +
                  std::to_string(blocks.row_bytes));
  }
  const bool with_ring = config.kind == LayerKind::csa && ring;
  ByteRows entries;
  if (with_ring) {
    entries = byte_rows(*ring, "ring", where);
    const auto entry = static_cast<int64_t>(ring_entry_bytes(config));
    if (entries.row_bytes < entry) {
      fail_argument("ring: expected >= " + std::to_string(entry) +
                    " bytes per entry (ring_entry_bytes), got " +
                    std::to_string(entries.row_bytes));
    }
  }
  LayerCache cache = packed_layer_cache(config, blocks.data, blocks.rows, blocks.row_stride,
                                        entries.data, entries.rows, where.device);
  if (with_ring) cache.ring.entry_stride = entries.row_stride;
  return cache;
}

}  // namespace step5::python
