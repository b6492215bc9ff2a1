// Non-owning strided views over caller memory. Engines pass raw pointers;
// the library never owns or allocates tensors it is handed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace step5 {

enum class DType : uint8_t { bf16, fp8_e4m3, f32, i32, i64 };
enum class Device : uint8_t { host, cuda };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* device_name(Device device);

constexpr int kMaxRank = 4;

// shape and stride are in elements (as in torch); stride may be any value for
// outer dimensions, validation decides what each argument accepts.
struct TensorView {
  void* data = nullptr;  // null means "absent" for optional arguments
  DType dtype = DType::f32;
  Device device = Device::host;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};

  // A dense row-major view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::host);

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  int64_t size(int dim) const { return shape[static_cast<size_t>(dim)]; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

}  // namespace step5
