// The sm_90 bulk copy (cp.async.bulk, global -> shared) and the
// transaction-counting mbarrier that tells when its bytes have landed. One
// instruction moves a whole contiguous row (a multiple of 16 bytes), where
// cp.async needs one instruction (and its address arithmetic) per 16 bytes.
// Hopper-only PTX lives here and in common/wgmma.cuh.
//
// A pipeline stage owns an mbarrier that tells when its copies have
// landed. Each use of the stage is one phase: every copying thread arrives
// once, announcing the bytes it started (arrive_expect_tx), and the phase
// completes when all have arrived and all those bytes have landed. Use u of
// a stage waits for phase parity u & 1. A second mbarrier per stage, with
// plain arrivals, can tell the copying threads when the stage was read.
#pragma once

#include <cstdint>

namespace step5::cuda::bulk {

// Sets up an mbarrier (8-byte aligned shared memory) for `arrivals` arrivals
// per phase. One thread calls it; the CTA synchronizes before first use.
__device__ __forceinline__ void init(uint32_t bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes initialized mbarriers visible to the async proxy (the bulk copies
// complete their transactions there).
__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// This thread's arrival on the current phase, expecting `bytes` more bytes
// of copies (0: a plain arrival). Releases this thread's earlier shared
// stores to the threads that wait on the phase.
__device__ __forceinline__ void arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// This thread's plain arrival on the current phase; releases its earlier
// shared-memory reads and writes to the threads that wait on the phase.
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
// global memory to shared memory; completion counts against `bar`.
__device__ __forceinline__ void copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Orders this thread's generic-proxy shared stores before later async-proxy
// writes (bulk copies) to the same bytes.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace step5::cuda::bulk
