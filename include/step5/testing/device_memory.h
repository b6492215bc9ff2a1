// Owning buffers on a backend's device, for the simulator only. Host
// buffers are 256-byte aligned heap memory; cuda buffers use the CUDA
// runtime, which is linked only in builds with the cuda backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "step5/tensor.h"

namespace step5::sim {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // At least one byte is allocated so that even an empty tensor has a
  // non-null address (a null pointer means "absent" to the API).
  DeviceBuffer(Device device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  void fill(uint8_t byte);

  template <class T>
  static DeviceBuffer from(Device device, const std::vector<T>& host) {
    DeviceBuffer buffer(device, host.size() * sizeof(T));
    buffer.upload(host.data(), host.size() * sizeof(T));
    return buffer;
  }
  template <class T>
  std::vector<T> to_vector(size_t count) const {
    std::vector<T> host(count);
    download(host.data(), count * sizeof(T));
    return host;
  }

 private:
  void release();
  Device device_ = Device::host;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for all work on the device (no-op for the host).
void synchronize(Device device);

}  // namespace step5::sim
