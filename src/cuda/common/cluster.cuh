// Thread-block clusters (sm_90 and later): the CTAs of a cluster run at the
// same time on SMs of one GPC, may wait for each other at a cluster
// barrier, and read each other's shared memory (distributed shared
// memory). Older targets (the compute_80 PTX) have none of it: the kernels
// that use these are never launched there (the plan checks the compute
// capability) and trap if they are.
#pragma once

#include <cstdint>

namespace step5::cuda {

#if defined(__CUDACC__)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define STEP5_CLUSTER_UNSUPPORTED __trap()
#else
#define STEP5_CLUSTER_UNSUPPORTED
#endif

// This CTA's rank in its cluster.
__device__ __forceinline__ int cluster_rank() {
  uint32_t rank = 0;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#else
  STEP5_CLUSTER_UNSUPPORTED;
#endif
  return static_cast<int>(rank);
}

// Arrival at the cluster barrier: this thread's shared and global writes
// before it are visible to every thread of the cluster after its wait.
// Every thread of every CTA of the cluster arrives, then waits.
__device__ __forceinline__ void cluster_arrive() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
  STEP5_CLUSTER_UNSUPPORTED;
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  STEP5_CLUSTER_UNSUPPORTED;
#endif
}

__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// The address of `local` (this CTA's shared memory) in the CTA of rank
// `rank` of the cluster: the same variable there, read with ordinary loads.
template <class T>
__device__ __forceinline__ T* cluster_peer(T* local, int rank) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  uint64_t peer = 0;
  asm volatile("mapa.u64 %0, %1, %2;"
               : "=l"(peer)
               : "l"(reinterpret_cast<uint64_t>(local)), "r"(static_cast<uint32_t>(rank)));
  return reinterpret_cast<T*>(peer);
#else
  (void)rank;
  STEP5_CLUSTER_UNSUPPORTED;
  return local;
#endif
}

#undef STEP5_CLUSTER_UNSUPPORTED
#endif

}  // namespace step5::cuda
