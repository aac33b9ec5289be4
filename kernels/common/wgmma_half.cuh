#pragma once
// Hopper warpgroup MMA for 16-bit inputs (wgmma, sm_90a): D(64 x N, fp32 registers) += A(64 x 16) *
// B(16 x N), both operands bf16 (or both fp16) in shared memory, 128-byte swizzled, K-major (or A
// M-major, or B N-major: mma_half's template flags); and
// the same with TF32 operands in shared memory, 8 terms a step (the same 32 bytes of a row).
// Beside common/wgmma.cuh (TF32, A from registers), whose fence / commit / wait / settle these
// kernels use too.
//
// Shared-memory operand layout (K-major A and B): rows (A: output positions, B: output channels) of
// 64 halves, 128 bytes each, consecutive; in each group of 8 rows (1024 bytes, 1024-byte aligned)
// the 16-byte chunk j of row r lies at chunk j ^ (r % 8) (the 128-byte swizzle). A descriptor
// names the first row and the k16 step (32 bytes in), the 8-row groups SBO = 1024 bytes apart.
//
// D fragments (warp w of the warpgroup, g = lane / 4, t = lane % 4):
//   d[4j + e] = (row 16w + g + 8 * (e / 2), column 8j + 2t + e % 2)
#include "common/wgmma.cuh"

namespace conv3djit::wgmma {

// d = (accumulate ? d : 0) + A * B, N = 64, 96, 112, 128, 192 or 256 columns; BF16 picks .bf16 or
// .f16 inputs; M_MAJOR reads A in M-major order (wgmma's transposed A: 64 rows of a k step
// contiguous, 128 bytes a k, the same 128-byte swizzle and 1024-byte SBO between groups of 8 k; a
// k16 step is 2048 bytes further, one 64-row operand needs no LBO); N_MAJOR reads B so
// (descriptor_mn_sw128: N in atoms of 64 columns, LBO bytes apart).
template <int N, bool BF16, bool M_MAJOR = false, bool N_MAJOR = false>
__device__ __forceinline__ void mma_half(float (&d)[N / 2], unsigned long long a, unsigned long long b,
                                         bool accumulate);

// d = (accumulate ? d : 0) + A * B, N = 64, 96, 128, 192 or 256 columns, A(64 x 8) and B(8 x N) TF32
// in shared memory, both K-major (TF32 has no transposed operands), laid out as mma_half's: a k8
// step is the same 32 bytes of a 128-byte row. The tensor cores read an operand's top 19 bits.
template <int N>
__device__ __forceinline__ void mma_tf32(float (&d)[N / 2], unsigned long long a, unsigned long long b,
                                         bool accumulate);

// d = (accumulate ? d : 0) + A * B with A from registers, N = 64 or 128: a[0] = (row 16w + g,
// k 2t .. 2t + 1), a[1] = (row + 8, the same k), a[2] = (row, k 2t + 8 .. 2t + 9), a[3] = (row + 8,
// those k), two halves a register (the lower k in the low half); B in shared memory as for
// wgmma::mma (common/wgmma.cuh: K-major core matrices of 8 columns x 16 bytes, no swizzle).
template <int N, bool BF16>
__device__ __forceinline__ void mma_half_regs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b,
                                              bool accumulate);

// One specialisation per width and type; inline asm numbers the R = N / 2 accumulators %0 .. %R-1
// first (CONV3DJIT_R<i>: the operand names i .. i + 7), then the two descriptors and the
// accumulate flag.
#define CONV3DJIT_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define CONV3DJIT_R8 "%8, %9, %10, %11, %12, %13, %14, %15"
#define CONV3DJIT_R16 "%16, %17, %18, %19, %20, %21, %22, %23"
#define CONV3DJIT_R24 "%24, %25, %26, %27, %28, %29, %30, %31"
#define CONV3DJIT_R32 "%32, %33, %34, %35, %36, %37, %38, %39"
#define CONV3DJIT_R40 "%40, %41, %42, %43, %44, %45, %46, %47"
#define CONV3DJIT_R48 "%48, %49, %50, %51, %52, %53, %54, %55"
#define CONV3DJIT_R56 "%56, %57, %58, %59, %60, %61, %62, %63"
#define CONV3DJIT_R64 "%64, %65, %66, %67, %68, %69, %70, %71"
#define CONV3DJIT_R72 "%72, %73, %74, %75, %76, %77, %78, %79"
#define CONV3DJIT_R80 "%80, %81, %82, %83, %84, %85, %86, %87"
#define CONV3DJIT_R88 "%88, %89, %90, %91, %92, %93, %94, %95"
#define CONV3DJIT_R96 "%96, %97, %98, %99, %100, %101, %102, %103"
#define CONV3DJIT_R104 "%104, %105, %106, %107, %108, %109, %110, %111"
#define CONV3DJIT_R112 "%112, %113, %114, %115, %116, %117, %118, %119"
#define CONV3DJIT_R120 "%120, %121, %122, %123, %124, %125, %126, %127"
#define CONV3DJIT_D8(i)                                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define CONV3DJIT_WGMMA_HALF_T(N, BF16, M_MAJOR, N_MAJOR, TRANS_A, TRANS_B, TYPE, D_REGS, DESCS, FLAG, ...)   \
  template <>                                                                                             \
  __device__ __forceinline__ void mma_half<N, BF16, M_MAJOR, N_MAJOR>(float(&d)[N / 2], unsigned long long a, \
                                                                      unsigned long long b, bool accumulate) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" D_REGS "}, " DESCS     \
                 ", p, 1, 1, " TRANS_A ", " TRANS_B ";\n}\n"                                                \
                 : __VA_ARGS__                                                                            \
                 : "l"(a), "l"(b), "r"(int(accumulate)));                                                 \
  }
#define CONV3DJIT_WGMMA_HALF_REGS(N, BF16, TYPE, D_REGS, A_REGS, DESC, FLAG, ...)                           \
  template <>                                                                                             \
  __device__ __forceinline__ void mma_half_regs<N, BF16>(float(&d)[N / 2], const unsigned(&a)[4],         \
                                                         unsigned long long b, bool accumulate) {         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" D_REGS "}, {" A_REGS  \
                 "}, " DESC ", p, 1, 1, 0;\n}\n"                                                          \
                 : __VA_ARGS__                                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));            \
  }
#define CONV3DJIT_WGMMA_TF32(N, D_REGS, DESCS, FLAG, ...)                                                 \
  template <>                                                                                             \
  __device__ __forceinline__ void mma_tf32<N>(float(&d)[N / 2], unsigned long long a, unsigned long long b, \
                                              bool accumulate) {                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" D_REGS "}, " DESCS ", p, 1, 1;\n}\n" \
                 : __VA_ARGS__                                                                            \
                 : "l"(a), "l"(b), "r"(int(accumulate)));                                                 \
  }
// Both orders of A, with B K-major, and K-major A with N-major B, for one width and type.
#define CONV3DJIT_WGMMA_HALF(N, BF16, TYPE, D_REGS, DESCS, FLAG, ...)                                   \
  CONV3DJIT_WGMMA_HALF_T(N, BF16, false, false, "0", "0", TYPE, D_REGS, DESCS, FLAG, __VA_ARGS__)      \
  CONV3DJIT_WGMMA_HALF_T(N, BF16, true, false, "1", "0", TYPE, D_REGS, DESCS, FLAG, __VA_ARGS__)       \
  CONV3DJIT_WGMMA_HALF_T(N, BF16, false, true, "0", "1", TYPE, D_REGS, DESCS, FLAG, __VA_ARGS__)
// The register lists and operands of each width, each the previous width's and more.
#define CONV3DJIT_L64 CONV3DJIT_R0 ", " CONV3DJIT_R8 ", " CONV3DJIT_R16 ", " CONV3DJIT_R24
#define CONV3DJIT_L96 CONV3DJIT_L64 ", " CONV3DJIT_R32 ", " CONV3DJIT_R40
#define CONV3DJIT_L112 CONV3DJIT_L96 ", " CONV3DJIT_R48
#define CONV3DJIT_L128 CONV3DJIT_L96 ", " CONV3DJIT_R48 ", " CONV3DJIT_R56
#define CONV3DJIT_L192 CONV3DJIT_L128 ", " CONV3DJIT_R64 ", " CONV3DJIT_R72 ", " CONV3DJIT_R80 ", " CONV3DJIT_R88
#define CONV3DJIT_L256 CONV3DJIT_L192 ", " CONV3DJIT_R96 ", " CONV3DJIT_R104 ", " CONV3DJIT_R112 ", " CONV3DJIT_R120
#define CONV3DJIT_O64 CONV3DJIT_D8(0), CONV3DJIT_D8(8), CONV3DJIT_D8(16), CONV3DJIT_D8(24)
#define CONV3DJIT_O96 CONV3DJIT_O64, CONV3DJIT_D8(32), CONV3DJIT_D8(40)
#define CONV3DJIT_O112 CONV3DJIT_O96, CONV3DJIT_D8(48)
#define CONV3DJIT_O128 CONV3DJIT_O96, CONV3DJIT_D8(48), CONV3DJIT_D8(56)
#define CONV3DJIT_O192 CONV3DJIT_O128, CONV3DJIT_D8(64), CONV3DJIT_D8(72), CONV3DJIT_D8(80), CONV3DJIT_D8(88)
#define CONV3DJIT_O256 CONV3DJIT_O192, CONV3DJIT_D8(96), CONV3DJIT_D8(104), CONV3DJIT_D8(112), CONV3DJIT_D8(120)
#define CONV3DJIT_HALF_N64(BF16, TYPE) \
  CONV3DJIT_WGMMA_HALF(64, BF16, TYPE, CONV3DJIT_L64, "%32, %33", "%34", CONV3DJIT_O64)
#define CONV3DJIT_HALF_N96(BF16, TYPE) \
  CONV3DJIT_WGMMA_HALF(96, BF16, TYPE, CONV3DJIT_L96, "%48, %49", "%50", CONV3DJIT_O96)
#define CONV3DJIT_HALF_N112(BF16, TYPE) \
  CONV3DJIT_WGMMA_HALF(112, BF16, TYPE, CONV3DJIT_L112, "%56, %57", "%58", CONV3DJIT_O112)
#define CONV3DJIT_HALF_N128(BF16, TYPE) \
  CONV3DJIT_WGMMA_HALF(128, BF16, TYPE, CONV3DJIT_L128, "%64, %65", "%66", CONV3DJIT_O128)
#define CONV3DJIT_HALF_N192(BF16, TYPE) \
  CONV3DJIT_WGMMA_HALF(192, BF16, TYPE, CONV3DJIT_L192, "%96, %97", "%98", CONV3DJIT_O192)
#define CONV3DJIT_HALF_N256(BF16, TYPE) \
  CONV3DJIT_WGMMA_HALF(256, BF16, TYPE, CONV3DJIT_L256, "%128, %129", "%130", CONV3DJIT_O256)
CONV3DJIT_WGMMA_HALF_REGS(64, true, "bf16", CONV3DJIT_L64, "%32, %33, %34, %35", "%36", "%37", CONV3DJIT_O64)
CONV3DJIT_WGMMA_HALF_REGS(64, false, "f16", CONV3DJIT_L64, "%32, %33, %34, %35", "%36", "%37", CONV3DJIT_O64)
CONV3DJIT_WGMMA_HALF_REGS(128, true, "bf16", CONV3DJIT_L128, "%64, %65, %66, %67", "%68", "%69", CONV3DJIT_O128)
CONV3DJIT_WGMMA_HALF_REGS(128, false, "f16", CONV3DJIT_L128, "%64, %65, %66, %67", "%68", "%69", CONV3DJIT_O128)
CONV3DJIT_HALF_N64(true, "bf16")
CONV3DJIT_HALF_N64(false, "f16")
CONV3DJIT_HALF_N96(true, "bf16")
CONV3DJIT_HALF_N96(false, "f16")
CONV3DJIT_HALF_N112(true, "bf16")
CONV3DJIT_HALF_N112(false, "f16")
CONV3DJIT_HALF_N128(true, "bf16")
CONV3DJIT_HALF_N128(false, "f16")
CONV3DJIT_HALF_N192(true, "bf16")
CONV3DJIT_HALF_N192(false, "f16")
CONV3DJIT_HALF_N256(true, "bf16")
CONV3DJIT_HALF_N256(false, "f16")
CONV3DJIT_WGMMA_TF32(64, CONV3DJIT_L64, "%32, %33", "%34", CONV3DJIT_O64)
CONV3DJIT_WGMMA_TF32(96, CONV3DJIT_L96, "%48, %49", "%50", CONV3DJIT_O96)
CONV3DJIT_WGMMA_TF32(128, CONV3DJIT_L128, "%64, %65", "%66", CONV3DJIT_O128)
CONV3DJIT_WGMMA_TF32(192, CONV3DJIT_L192, "%96, %97", "%98", CONV3DJIT_O192)
CONV3DJIT_WGMMA_TF32(256, CONV3DJIT_L256, "%128, %129", "%130", CONV3DJIT_O256)
#undef CONV3DJIT_HALF_N256
#undef CONV3DJIT_HALF_N192
#undef CONV3DJIT_HALF_N128
#undef CONV3DJIT_HALF_N112
#undef CONV3DJIT_HALF_N96
#undef CONV3DJIT_HALF_N64
#undef CONV3DJIT_WGMMA_HALF
#undef CONV3DJIT_WGMMA_HALF_T
#undef CONV3DJIT_WGMMA_TF32
#undef CONV3DJIT_WGMMA_HALF_REGS
#undef CONV3DJIT_L64
#undef CONV3DJIT_O64
#undef CONV3DJIT_L96
#undef CONV3DJIT_O96
#undef CONV3DJIT_L112
#undef CONV3DJIT_O112
#undef CONV3DJIT_L128
#undef CONV3DJIT_O128
#undef CONV3DJIT_L192
#undef CONV3DJIT_O192
#undef CONV3DJIT_L256
#undef CONV3DJIT_O256
#undef CONV3DJIT_D8
#undef CONV3DJIT_R0
#undef CONV3DJIT_R8
#undef CONV3DJIT_R16
#undef CONV3DJIT_R24
#undef CONV3DJIT_R32
#undef CONV3DJIT_R40
#undef CONV3DJIT_R48
#undef CONV3DJIT_R56
#undef CONV3DJIT_R64
#undef CONV3DJIT_R72
#undef CONV3DJIT_R80
#undef CONV3DJIT_R88
#undef CONV3DJIT_R96
#undef CONV3DJIT_R104
#undef CONV3DJIT_R112
#undef CONV3DJIT_R120

}  // namespace conv3djit::wgmma
