#include "step5/tensor.h"

#include "core/check.h"

namespace step5 {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 2;
    case DType::fp8_e4m3: return 1;
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

const char* device_name(Device device) {
  return device == Device::host ? "host" : "cuda";
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.rank = static_cast<int>(shape.size());
  detail::require(view.rank >= 1 && view.rank <= kMaxRank, ErrorCode::invalid_argument,
                  "TensorView::contiguous: rank expected 1..", kMaxRank, ", got ", view.rank);
  int i = 0;
  for (int64_t s : shape) view.shape[static_cast<size_t>(i++)] = s;
  int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.stride[static_cast<size_t>(d)] = stride;
    stride *= view.shape[static_cast<size_t>(d)];
  }
  return view;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[static_cast<size_t>(d)];
  return n;
}

namespace detail {

std::string shape_string(const TensorView& view) {
  std::string out = "[";
  for (int d = 0; d < view.rank; ++d) {
    if (d > 0) out += ", ";
    append(out, view.shape[static_cast<size_t>(d)]);
  }
  out += ']';
  return out;
}

void check_tensor(const TensorView& view, const TensorSpec& spec) {
  if (!view.present()) {
    if (spec.optional) return;
    fail_invalid(spec.what, ": required tensor is missing (null data)");
  }
  require(view.dtype == spec.dtype, ErrorCode::invalid_argument, spec.what, ": dtype expected ",
          dtype_name(spec.dtype), ", got ", dtype_name(view.dtype));
  require(view.device == spec.device, ErrorCode::invalid_argument, spec.what, ": device expected ",
          device_name(spec.device), ", got ", device_name(view.device));
  // Checked on every forward: the message (and its shape string) is built
  // only on failure.
  const auto rank = static_cast<int>(spec.dims.size());
  if (view.rank != rank) {
    fail_invalid(spec.what, ": rank expected ", rank, ", got ", view.rank, " (shape ",
                 shape_string(view), ")");
  }
  int d = 0;
  for (int64_t want : spec.dims) {
    const int64_t got = view.shape[static_cast<size_t>(d)];
    if (d == 0 && spec.min_rows) {
      if (got < want) {
        fail_invalid(spec.what, ": dim 0 expected >= ", want, ", got ", got, " (shape ",
                     shape_string(view), ")");
      }
    } else if (want >= 0 && got != want) {
      fail_invalid(spec.what, ": dim ", d, " expected ", want, ", got ", got, " (shape ",
                   shape_string(view), ")");
    }
    ++d;
  }
  require(view.stride[static_cast<size_t>(rank - 1)] == 1 ||
              view.shape[static_cast<size_t>(rank - 1)] <= 1,
          ErrorCode::invalid_argument, spec.what, ": innermost stride expected 1, got ",
          view.stride[static_cast<size_t>(rank - 1)]);
  for (int k = 0; k < rank - 1; ++k) {
    require(view.stride[static_cast<size_t>(k)] >= 0, ErrorCode::invalid_argument, spec.what,
            ": stride of dim ", k, " expected >= 0, got ", view.stride[static_cast<size_t>(k)]);
  }
}

}  // namespace detail
}  // namespace step5
