// The wgmma forms of the Hopper tile attention, with operands in shared
// memory in 128-byte swizzled atoms the caller places: an atom is 8 rows x
// 128 bytes (64 bf16), the 16-byte chunk c of row r at chunk c ^ r, so
// 16-byte cp.async copies of paged rows land in it directly. S = Q K^T
// takes Q (A, K-major) and K (B, K-major: the head dimension runs along K)
// from shared memory; O = P V takes P from registers and V (B, N-major: the
// head dimension runs along N, imm-trans-b = 1) from the same atoms as K.
// bf16, fp32 accumulators; register layouts as in common/wgmma.cuh.
#pragma once

#include <cstdint>

namespace step5::cuda::wgmma {

// Matrix descriptor of a 128-byte swizzled operand whose atoms start on
// 1024-byte boundaries (PTX ISA, canonical layouts; T = 8 bf16):
//   K-major  ((8,m),(T,2k)):((8T,sbo),(1,T)): 8 rows of 128 bytes per atom,
//            `sbo` between atoms along M / N, the k16 step chosen by adding
//            32 bytes per step to the start address (`lbo` unused);
//   MN-major ((T,8,m),(8,k)):((1,T,lbo),(8T,sbo)): 64 elements of M / N per
//            128-byte row, `lbo` between atoms along M / N, `sbo` between
//            atoms along K (8 rows each).
// Offsets are multiples of 16 below 256 KB.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_addr & 0x3ffffu) >> 4);  // start address, bits 0-13
  desc |= static_cast<uint64_t>((lbo & 0x3ffffu) >> 4) << 16;  // leading offset, bits 16-29
  desc |= static_cast<uint64_t>((sbo & 0x3ffffu) >> 4) << 32;  // stride offset, bits 32-45
  desc |= static_cast<uint64_t>(1) << 62;                      // layout: 128-byte swizzle
  return desc;
}

// A descriptor `bytes` further on (the start address field, in 16-byte
// units, never carries: shared addresses stay below 256 KB).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xffffffff00000000ull) | lo;
}

// Eight fp32 accumulator operands d[i] .. d[i + 7] of a wgmma asm statement
// (read and written); the shapes below list theirs eight at a time.
#define STEP5_WGMMA_D8(i)                                                                     \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// d (+)= A * B for one k16 step, A and B both K-major in shared memory,
// bf16 (kF16 false) or f16, d[N / 2]; scale_d = 0 starts a fresh
// accumulation. Each shape's operand list is spelled once, in a macro of
// the operand type.
template <int N, bool kF16 = false>
struct WgmmaSs;

#define STEP5_WGMMA_SS_64(TY)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY                        \
      " {"                                                                           \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                       \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"              \
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                             \
      : STEP5_WGMMA_D8(0), STEP5_WGMMA_D8(8), STEP5_WGMMA_D8(16), STEP5_WGMMA_D8(24) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
template <bool kF16>
struct WgmmaSs<64, kF16> {
  __device__ __forceinline__ static void mma(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {
    if constexpr (kF16) {
      STEP5_WGMMA_SS_64("f16");
    } else {
      STEP5_WGMMA_SS_64("bf16");
    }
  }
};
#undef STEP5_WGMMA_SS_64

// d (+)= A * B for one k16 step with B N-major (imm-trans-b = 1), bf16
// (kF16 false) or f16, d[N / 2]; scale_d = 0 starts a fresh accumulation.
template <int N, bool kF16 = false>
struct WgmmaRsNMajor;

#define STEP5_WGMMA_RS_NMAJOR_64(TY)                                                 \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY                        \
      " {"                                                                           \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                       \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"              \
      "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"                                  \
      : STEP5_WGMMA_D8(0), STEP5_WGMMA_D8(8), STEP5_WGMMA_D8(16), STEP5_WGMMA_D8(24) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
template <bool kF16>
struct WgmmaRsNMajor<64, kF16> {
  __device__ __forceinline__ static void mma(float (&d)[32], const uint32_t (&a)[4],
                                             uint64_t desc_b, int scale_d) {
    if constexpr (kF16) {
      STEP5_WGMMA_RS_NMAJOR_64("f16");
    } else {
      STEP5_WGMMA_RS_NMAJOR_64("bf16");
    }
  }
};
#undef STEP5_WGMMA_RS_NMAJOR_64

#define STEP5_WGMMA_RS_NMAJOR_128(TY)                                                  \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY                         \
      " {"                                                                             \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                         \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"               \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"               \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"                \
      "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"                                    \
      : STEP5_WGMMA_D8(0), STEP5_WGMMA_D8(8), STEP5_WGMMA_D8(16), STEP5_WGMMA_D8(24),  \
        STEP5_WGMMA_D8(32), STEP5_WGMMA_D8(40), STEP5_WGMMA_D8(48), STEP5_WGMMA_D8(56) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
template <bool kF16>
struct WgmmaRsNMajor<128, kF16> {
  __device__ __forceinline__ static void mma(float (&d)[64], const uint32_t (&a)[4],
                                             uint64_t desc_b, int scale_d) {
    if constexpr (kF16) {
      STEP5_WGMMA_RS_NMAJOR_128("f16");
    } else {
      STEP5_WGMMA_RS_NMAJOR_128("bf16");
    }
  }
};
#undef STEP5_WGMMA_RS_NMAJOR_128

#define STEP5_WGMMA_RS_NMAJOR_192(TY)                                                   \
  asm volatile(                                                                         \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY                          \
      " {"                                                                              \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                          \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                \
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                \
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"                 \
      "}, {%96,%97,%98,%99}, %100, p, 1, 1, 1;\n}\n"                                    \
      : STEP5_WGMMA_D8(0), STEP5_WGMMA_D8(8), STEP5_WGMMA_D8(16), STEP5_WGMMA_D8(24),   \
        STEP5_WGMMA_D8(32), STEP5_WGMMA_D8(40), STEP5_WGMMA_D8(48), STEP5_WGMMA_D8(56), \
        STEP5_WGMMA_D8(64), STEP5_WGMMA_D8(72), STEP5_WGMMA_D8(80), STEP5_WGMMA_D8(88)  \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
template <bool kF16>
struct WgmmaRsNMajor<192, kF16> {
  __device__ __forceinline__ static void mma(float (&d)[96], const uint32_t (&a)[4],
                                             uint64_t desc_b, int scale_d) {
    if constexpr (kF16) {
      STEP5_WGMMA_RS_NMAJOR_192("f16");
    } else {
      STEP5_WGMMA_RS_NMAJOR_192("bf16");
    }
  }
};
#undef STEP5_WGMMA_RS_NMAJOR_192

#undef STEP5_WGMMA_D8

}  // namespace step5::cuda::wgmma
