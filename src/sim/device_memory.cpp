#include "step5/testing/device_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/check.h"

#if defined(STEP5_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace step5::sim {

namespace {

constexpr size_t kAlign = 256;

#if defined(STEP5_HAVE_CUDA)
void check_cuda(cudaError_t status, const char* what) {
  detail::require(status == cudaSuccess, ErrorCode::device_error, "sim: ", what,
                  " failed: ", cudaGetErrorString(status));
}
#else
[[noreturn]] void no_cuda() {
  detail::fail(ErrorCode::unsupported,
               "sim: device memory expected a build with the CUDA backend, got a CPU-only build");
}
#endif

}  // namespace

DeviceBuffer::DeviceBuffer(Device device, size_t bytes) : device_(device), bytes_(bytes) {
  const size_t size = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  if (device == Device::host) {
    data_ = std::aligned_alloc(kAlign, size);
    detail::require(data_ != nullptr, ErrorCode::device_error, "sim: host allocation of ", size,
                    " bytes failed");
    return;
  }
#if defined(STEP5_HAVE_CUDA)
  check_cuda(cudaMalloc(&data_, size), "cudaMalloc");
#else
  no_cuda();
#endif
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() {
  if (data_ == nullptr) return;
  if (device_ == Device::host) {
    std::free(data_);
  } else {
#if defined(STEP5_HAVE_CUDA)
    cudaFree(data_);
#endif
  }
  data_ = nullptr;
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  detail::require(offset + bytes <= bytes_, ErrorCode::out_of_range, "sim: upload of ", bytes,
                  " bytes at ", offset, " expected within the buffer (", bytes_, " bytes)");
  if (bytes == 0) return;
  char* dst = static_cast<char*>(data_) + offset;
  if (device_ == Device::host) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(STEP5_HAVE_CUDA)
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
#else
  no_cuda();
#endif
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  detail::require(offset + bytes <= bytes_, ErrorCode::out_of_range, "sim: download of ", bytes,
                  " bytes at ", offset, " expected within the buffer (", bytes_, " bytes)");
  if (bytes == 0) return;
  const char* src = static_cast<const char*>(data_) + offset;
  if (device_ == Device::host) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(STEP5_HAVE_CUDA)
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
#else
  no_cuda();
#endif
}

void DeviceBuffer::fill(uint8_t byte) {
  if (bytes_ == 0) return;
  if (device_ == Device::host) {
    std::memset(data_, byte, bytes_);
    return;
  }
#if defined(STEP5_HAVE_CUDA)
  check_cuda(cudaMemset(data_, byte, bytes_), "cudaMemset");
#else
  no_cuda();
#endif
}

void synchronize(Device device) {
  if (device == Device::host) return;
#if defined(STEP5_HAVE_CUDA)
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  no_cuda();
#endif
}

}  // namespace step5::sim
