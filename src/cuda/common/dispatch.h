// The one place where runtime storage dtypes become template parameters of
// the cuda backend's own kernels. Only the dtypes the contract allows are
// instantiated; anything else is a clear Error rather than a silent path.
// (The select kernel, when it carries a decode step's cache update, picks
// between the two instances of the K/V write and summaries inside the
// kernel, on flags its launch set from these dtypes: one select instance.)
#pragma once

#include "core/check.h"
#include "step5/tensor.h"

namespace step5::cuda {

// Tag types for the two cache storage formats (KV and summaries).
struct Bf16Tag {
  static constexpr bool kFp8 = false;
};
struct Fp8Tag {
  static constexpr bool kFp8 = true;
};

template <class F>
void dispatch_storage(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::bf16: f(Bf16Tag{}); return;
    case DType::fp8_e4m3: f(Fp8Tag{}); return;
    default:
      detail::fail(ErrorCode::unsupported,
                   detail::concat("cuda backend: ", what, " expected bf16 or fp8_e4m3, got ",
                                  dtype_name(dtype)));
  }
}

}  // namespace step5::cuda
