// Host time of one kernel launch on this machine, by launch API, parameter
// size and launch attribute: the CUDA driver's share of a forward call's
// host time (bench/host_work measures the library's own share). Launches
// go to an idle GPU (empty kernels), in batches of 200 between
// synchronizations, best of 9 batches, three times. Then a forward's three
// dependent launches, timed while the GPU is busy (queued behind a spinning
// kernel, as a layer's launches queue behind the layers before it): as
// three direct launches, and as one launch of an instantiated three-node
// graph whose nodes are updated per forward (a way to one submission per
// forward). Not part of the build:
//
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//       -o /tmp/launch_cost bench/launch_cost.cu -lcuda
//   /tmp/launch_cost
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

namespace {

struct Big {
  char bytes[512];  // about the size of the library's kernel parameters
};
struct Small {
  void* p;
  int n;
};

// The bodies only keep the parameters alive.
__global__ void empty_kernel() {}
__global__ void small_kernel(Small s) {
  if (s.n == 7 && threadIdx.x == 9999) printf("x");
}
__global__ void big_kernel(Big b) {
  if (b.bytes[3] == 7 && threadIdx.x == 9999) printf("x");
}
__global__ void big_dependent_kernel(Big b) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (b.bytes[3] == 7 && threadIdx.x == 9999) printf("x");
}

// Host time per call of `launch(i)`, i = 0 .. batch - 1, in `rounds`
// batches between synchronizations, each after `before()`; the first batch
// warms up. Best and mean of the others.
struct BatchTimes {
  double best = 1e30;
  double mean = 0;
};
template <class F, class Before>
BatchTimes time_batches(F&& launch, Before&& before, int batch, int rounds, cudaStream_t stream) {
  BatchTimes t;
  for (int r = 0; r < rounds; ++r) {
    cudaStreamSynchronize(stream);
    before();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) launch(i);
    const auto t1 = std::chrono::steady_clock::now();
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / batch;
    if (r > 0) {
      t.best = us < t.best ? us : t.best;
      t.mean += us / (rounds - 1);
    }
  }
  cudaStreamSynchronize(stream);
  return t;
}

template <class F>
double best_us(F&& launch, cudaStream_t stream) {
  return time_batches([&](int) { launch(); }, [] {}, 200, 10, stream).best;
}

template <class F>
void report(const char* name, F&& launch, cudaStream_t stream) {
  const double a = best_us(launch, stream), b = best_us(launch, stream),
               c = best_us(launch, stream);
  std::printf("%-52s %.2f %.2f %.2f us\n", name, a, b, c);
}

// cudaLaunchKernelEx with or without the programmatic-serialization
// attribute (the library sets it on every launch; `programmatic` is its
// value), 132 CTAs of 128 threads.
template <class Arg>
void launch_ex(cudaStream_t stream, bool with_attribute, int programmatic, void (*kernel)(Arg),
               const Arg& arg, size_t smem) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(132);
  config.blockDim = dim3(128);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = programmatic;
  config.attrs = attribute;
  config.numAttrs = with_attribute ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, arg);
}

// Keeps one SM busy for `cycles` clock cycles, so that the launches timed
// after it queue behind running work, as a layer's launches do.
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// A forward's launches, three dependent kernels with 512-byte parameters,
// timed per forward while the GPU is busy: `enqueue(i)` issues forward i.
template <class F>
void report_busy(const char* name, F&& enqueue, cudaStream_t stream) {
  const BatchTimes t = time_batches(
      enqueue, [&] { spin_kernel<<<1, 32, 0, stream>>>(4000000); },  // ~2 ms
      46, 8, stream);
  std::printf("%-52s best %.2f mean %.2f us per forward (%s)\n", name, t.best, t.mean,
              cudaGetErrorString(cudaGetLastError()));
}

// One forward as three launches into the stream (what the library does).
void forward_direct(cudaStream_t s, const Big& big) {
  for (int k = 0; k < 3; ++k) launch_ex(s, true, 1, big_dependent_kernel, big, 0);
}

// One forward as one launch of an instantiated three-node graph, after
// setting each node's parameters (function, grid, arguments).
struct GraphForward {
  cudaGraphExec_t exec = nullptr;
  cudaGraphNode_t nodes[3] = {};
  int edges_programmatic = 0;
  int edges = 0;
};

GraphForward build_graph_forward(cudaStream_t s, const Big& big) {
  GraphForward g;
  cudaGraph_t graph;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  forward_direct(s, big);
  cudaStreamEndCapture(s, &graph);
  size_t count = 3;
  cudaGraphGetNodes(graph, g.nodes, &count);
  cudaGraphNode_t from[8], to[8];
  cudaGraphEdgeData data[8];
  size_t edges = 8;
  cudaGraphGetEdges(graph, from, to, data, &edges);
  g.edges = static_cast<int>(edges);
  for (size_t e = 0; e < edges; ++e)
    g.edges_programmatic += data[e].type == cudaGraphDependencyTypeProgrammatic ? 1 : 0;
  cudaGraphInstantiate(&g.exec, graph, 0);
  cudaGraphDestroy(graph);
  return g;
}

void forward_graph(cudaStream_t s, const GraphForward& g, Big* args, int i, bool set, bool swap) {
  if (set) {
    for (int k = 0; k < 3; ++k) {
      args[k].bytes[0] = static_cast<char>(i + k);
      void* params[] = {&args[k]};
      cudaKernelNodeParams p{};
      p.func = reinterpret_cast<void*>((swap && (i & 1)) ? big_kernel : big_dependent_kernel);
      p.gridDim = dim3(132 - (i & 3));
      p.blockDim = dim3(128);
      p.sharedMemBytes = 0;
      p.kernelParams = params;
      cudaGraphExecKernelNodeSetParams(g.exec, g.nodes[k], &p);
    }
  }
  cudaGraphLaunch(g.exec, s);
}

}  // namespace

int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const Big big{};
  const Small small{nullptr, 1};
  empty_kernel<<<1, 32, 0, s>>>();
  cudaStreamSynchronize(s);
  report(
      "<<<>>> empty, no args", [&] { empty_kernel<<<132, 128, 0, s>>>(); }, s);
  report(
      "<<<>>> 16-byte param", [&] { small_kernel<<<132, 128, 0, s>>>(small); }, s);
  report(
      "<<<>>> 512-byte param", [&] { big_kernel<<<132, 128, 0, s>>>(big); }, s);
  report(
      "cudaLaunchKernelEx 512 B, no attrs", [&] { launch_ex(s, false, 0, big_kernel, big, 0); }, s);
  report(
      "cudaLaunchKernelEx 512 B, PDL attr 0", [&] { launch_ex(s, true, 0, big_kernel, big, 0); },
      s);
  report(
      "cudaLaunchKernelEx 512 B, PDL attr 1",
      [&] { launch_ex(s, true, 1, big_dependent_kernel, big, 0); }, s);
  report(
      "cudaLaunchKernelEx 16 B, PDL attr 1", [&] { launch_ex(s, true, 1, small_kernel, small, 0); },
      s);
  cudaFuncSetAttribute(big_dependent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       200 * 1024);
  report(
      "cudaLaunchKernelEx 512 B, PDL 1, 200 KB smem",
      [&] { launch_ex(s, true, 1, big_dependent_kernel, big, 200 * 1024); }, s);
  // The driver API with the function looked up once.
  CUfunction function;
  cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&function),
                      reinterpret_cast<const void*>(big_dependent_kernel));
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found;
  cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &entry, 12000, cudaEnableDefault, &found);
  using LaunchEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  const auto cu_launch_ex = reinterpret_cast<LaunchEx>(entry);
  report(
      "cuLaunchKernelEx 512 B, PDL 1 (driver, cached)",
      [&] {
        CUlaunchConfig config{};
        config.gridDimX = 132;
        config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = 128;
        config.blockDimY = config.blockDimZ = 1;
        config.hStream = s;
        CUlaunchAttribute attribute[1];
        attribute[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute[0].value.programmaticStreamSerializationAllowed = 1;
        config.attrs = attribute;
        config.numAttrs = 1;
        void* args[] = {const_cast<Big*>(&big)};
        cu_launch_ex(&config, function, args, nullptr);
      },
      s);
  {
    Big args[3] = {};
    report_busy(
        "busy GPU: 3 x cudaLaunchKernelEx PDL 1", [&](int) { forward_direct(s, big); }, s);
    const GraphForward g = build_graph_forward(s, big);
    std::printf("captured graph: %d edges, %d programmatic\n", g.edges, g.edges_programmatic);
    report_busy(
        "busy GPU: cudaGraphLaunch (3 nodes, no updates)",
        [&](int i) { forward_graph(s, g, args, i, false, false); }, s);
    report_busy(
        "busy GPU: 3 x ExecKernelNodeSetParams + GraphLaunch",
        [&](int i) { forward_graph(s, g, args, i, true, false); }, s);
    report_busy(
        "busy GPU: the same, function changed every other",
        [&](int i) { forward_graph(s, g, args, i, true, true); }, s);
    report(
        "idle GPU: 3 x cudaLaunchKernelEx PDL 1", [&] { forward_direct(s, big); }, s);
    report(
        "idle GPU: 3 x SetParams + GraphLaunch", [&] { forward_graph(s, g, args, 5, true, false); },
        s);
  }
  int device = 0;
  report(
      "cudaGetDevice", [&] { cudaGetDevice(&device); }, s);
  report(
      "cudaGetLastError", [&] { (void)cudaGetLastError(); }, s);
  std::printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
