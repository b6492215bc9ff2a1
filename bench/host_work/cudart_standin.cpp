// A stand-in for libcudart.so.13 that needs no GPU, to time the library's
// own host work per forward call (validation, parameters, dispatch)
// apart from the CUDA driver's launch cost. Kernel launches return at once
// and do nothing; "device" memory is host memory (malloc), copies and sets
// are memcpy and memset, and the device claims to be a 132-SM sm_90 GPU
// with 227 KB of shared memory per block. Events count kernel launches:
// the "elapsed ms" between two events is the number of launches made
// between their records, so the bench's ms column becomes launches per
// forward. Outputs are meaningless: run the bench with --no-check, and
// read only its ms and "host us/forward" columns (run.sh does this; the
// launch_budget test, tests/launch_budget_test.py, checks the launches).
//
// It defines exactly the runtime entry points that step5attn imports; a
// binary that imports another fails to start with "undefined symbol",
// which names the one to add.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {
int opaque_object;  // what every stream and graph handle points to

std::atomic<unsigned long long> launches{0};  // kernel launches so far

// What a cudaEvent_t points to: the launch count at its last record.
struct Event {
  unsigned long long launches = 0;
};

template <class Handle>
Handle opaque() {
  return reinterpret_cast<Handle>(&opaque_object);
}

constexpr int kSmCount = 132;
constexpr int kSmemOptin = 232448;  // bytes per block (227 KB, sm_90)
constexpr int kSmemPerSm = 233472;
}  // namespace

extern "C" {

// Registration of the fat binary and its kernels (nvcc's host code).
void** __cudaRegisterFatBinary(void*) {
  return reinterpret_cast<void**>(&opaque_object);
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, void*, void*, void*,
                            void*, int*) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
cudaError_t __cudaGetKernel(void** kernel, const void* function) {
  if (kernel != nullptr) *kernel = const_cast<void*>(function);
  return cudaSuccess;
}

// Launches: counted and dropped.
unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, void*) {
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* smem, void* stream) {
  *grid = dim3(1);
  *block = dim3(1);
  *smem = 0;
  *static_cast<void**>(stream) = nullptr;
  return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  ++launches;
  return cudaSuccess;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**) {
  ++launches;
  return cudaSuccess;
}

// The device.
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) {
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "cudart stand-in (no GPU)");
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = kSmCount;
  p->sharedMemPerBlock = 49152;
  p->sharedMemPerBlockOptin = kSmemOptin;
  p->sharedMemPerMultiprocessor = kSmemPerSm;
  p->totalGlobalMem = size_t{80} << 30;
  p->l2CacheSize = 50 << 20;
  p->regsPerBlock = 65536;
  p->maxThreadsPerBlock = 1024;
  p->warpSize = 32;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int) {
  switch (attribute) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSmemOptin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = kSmemPerSm; break;
    case cudaDevAttrMultiProcessorCount: *value = kSmCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->numRegs = 64;
  a->binaryVersion = 90;
  a->ptxVersion = 90;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void*, int,
                                                                   size_t, unsigned) {
  *blocks = 1;
  return cudaSuccess;
}
// Every cluster size fits (the cluster selection then runs its 8-CTA clusters).
cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void*, const cudaLaunchConfig_t*) {
  *clusters = 16;
  return cudaSuccess;
}

// Memory: host memory. 24 GB "free" gives the bench an 8 GB pool (it keeps
// 16 GB back), which it never touches here: pages stay unmapped.
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  return cudaMalloc(ptr, bytes);
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = size_t{24} << 30;
  *total_bytes = size_t{80} << 30;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width, size_t height, cudaMemcpyKind) {
  for (size_t i = 0; i < height; ++i) {
    std::memcpy(static_cast<char*>(dst) + i * dst_pitch,
                static_cast<const char*>(src) + i * src_pitch, width);
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

// Streams and graphs: opaque handles, nothing to wait for. Events: launch
// counts.
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = opaque<cudaStream_t>();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) {
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new Event);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  return cudaEventCreate(event);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  reinterpret_cast<Event*>(event)->launches = launches.load();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  *ms = static_cast<float>(reinterpret_cast<Event*>(stop)->launches -
                           reinterpret_cast<Event*>(start)->launches);
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
  *graph = opaque<cudaGraph_t>();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t, unsigned long long) {
  *exec = opaque<cudaGraphExec_t>();
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) {
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t) {
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) {
  return cudaSuccess;
}

// Errors: there are none.
cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
const char* cudaGetErrorName(cudaError_t) {
  return "cudaSuccess";
}
const char* cudaGetErrorString(cudaError_t) {
  return "no error (cudart stand-in)";
}

}  // extern "C"
