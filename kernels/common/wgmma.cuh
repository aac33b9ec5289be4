#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a): D(64 x N) += A(64 x 8, registers) * B(8 x N, shared), TF32
// inputs, fp32 accumulators. A warpgroup is 4 consecutive warps starting at a multiple of 4.
//
// Fragments (per warp w of the warpgroup, g = lane / 4, t = lane % 4):
//   A: a[0] = (row 16w + g, k t), a[1] = (row + 8, k t), a[2] = (row, k t + 4), a[3] = (row + 8, k t + 4)
//   D: d[4j + e] = (row 16w + g + 8 * (e / 2), column 8j + 2t + e % 2)
// B lives in shared memory as K-major "core matrices" of 8 rows (n) x 4 tf32 (k), 128 contiguous
// bytes each, without swizzling: the k 0-3 and k 4-7 halves of one 8-column block are LBO bytes
// apart, consecutive 8-column blocks SBO bytes apart.

namespace conv3djit::wgmma {

inline constexpr unsigned kLbo = 128, kSbo = 256;  // the layout above, packed densely

// Shared-memory matrix descriptor: start address, LBO and SBO in 16-byte units, no swizzle.
__device__ __forceinline__ unsigned long long descriptor(const void* smem) {
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  using u64 = unsigned long long;
  return u64((addr & 0x3FFFF) >> 4) | (u64(kLbo >> 4) << 16) | (u64(kSbo >> 4) << 32);
}

// Descriptor of a K-major, 128-byte-swizzled operand at shared-memory address `addr` (a row
// start plus a multiple of 32 bytes inside it; the row group 1024-byte aligned): start address,
// LBO 16 bytes (unused with this swizzle), SBO 1024 bytes, layout type 1 (128-byte swizzle) in
// bits 62-63. Rows of 128 bytes, one an operand row (n, or m), as a TMA box with the 128-byte
// swizzle stores them: the 16-byte chunk j of row r lies at chunk j ^ (r % 8).
__device__ __forceinline__ unsigned long long descriptor_sw128(unsigned addr) {
  using u64 = unsigned long long;
  return u64((addr & 0x3FFFF) >> 4) | (u64(1) << 16) | (u64(1024 >> 4) << 32) | (u64(1) << 62);
}

// Descriptor of an MN-major, 128-byte-swizzled operand (wgmma's transposed B) at `addr`: rows of
// 128 bytes along MN (64 halves), one a k, as a TMA box of 64 x 64 halves with that swizzle
// stores them; groups of 8 k 1024 bytes apart (SBO), atoms of 64 MN columns `lbo` bytes apart
// (LBO). A k16 step starts 2048 bytes further.
__device__ __forceinline__ unsigned long long descriptor_mn_sw128(unsigned addr, unsigned lbo) {
  using u64 = unsigned long long;
  return u64((addr & 0x3FFFF) >> 4) | (u64(lbo >> 4) << 16) | (u64(1024 >> 4) << 32) | (u64(1) << 62);
}

// The same for rows of 64 bytes, 64-byte swizzled (the 16-byte chunk j of row r at chunk
// j ^ (r / 2 % 4), as a TMA box with that swizzle stores them): SBO 512 bytes (8 rows), layout
// type 2; the row group 512-byte aligned.
__device__ __forceinline__ unsigned long long descriptor_sw64(unsigned addr) {
  using u64 = unsigned long long;
  return u64((addr & 0x3FFFF) >> 4) | (u64(1) << 16) | (u64(512 >> 4) << 32) | (u64(2) << 62);
}

// And for rows of 32 bytes, 32-byte swizzled (the 16-byte chunk j of row r at chunk j ^ (r / 4 % 2)):
// SBO 256 bytes (8 rows), layout type 3; the row group 256-byte aligned.
__device__ __forceinline__ unsigned long long descriptor_sw32(unsigned addr) {
  using u64 = unsigned long long;
  return u64((addr & 0x3FFFF) >> 4) | (u64(1) << 16) | (u64(256 >> 4) << 32) | (u64(3) << 62);
}

// descriptor_sw128, descriptor_sw64 or descriptor_sw32 for rows of ROW bytes.
template <int ROW>
__device__ __forceinline__ unsigned long long descriptor_swizzled(unsigned addr) {
  static_assert(ROW == 128 || ROW == 64 || ROW == 32, "rows of 128, 64 or 32 bytes");
  if constexpr (ROW == 128) {
    return descriptor_sw128(addr);
  } else if constexpr (ROW == 64) {
    return descriptor_sw64(addr);
  } else {
    return descriptor_sw32(addr);
  }
}

// No "memory" clobbers below: B is written once before a __syncthreads and never again, and the
// accumulators are ordered by settle(), so the compiler may move shared-memory loads of the next
// A fragments across these (measured: the gather's load latency was the top stall).

// Orders this thread's register writes (A fragments, accumulators) before the next wgmma.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::); }
// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N));
}

// After wait(): the accumulators are read or written by ordinary code only from here on (keeps
// the compiler from moving those accesses above the wait).
template <int R>
__device__ __forceinline__ void settle(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]));
}

// d = (accumulate ? d : 0) + A * B for N = 32, 64, 128 or 256 columns.
template <int N>
__device__ __forceinline__ void mma(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, bool accumulate);

// One specialisation per width; inline asm numbers the R = N / 2 accumulators %0 .. %R-1 first,
// then a[0..3], the descriptor and the accumulate flag.
#define CONV3DJIT_D8(i)                                                                                   \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define CONV3DJIT_WGMMA_TF32(N, D_REGS, A_REGS, DESC, FLAG, ...)                                           \
  template <>                                                                                             \
  __device__ __forceinline__ void mma<N>(float(&d)[N / 2], const unsigned(&a)[4], unsigned long long b,   \
                                         bool accumulate) {                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" D_REGS "}, {" A_REGS "}, " DESC \
                 ", p, 1, 1;\n}\n"                                                                        \
                 : __VA_ARGS__                                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));            \
  }

CONV3DJIT_WGMMA_TF32(32, "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15",
                     "%16, %17, %18, %19", "%20", "%21", CONV3DJIT_D8(0), CONV3DJIT_D8(8))
CONV3DJIT_WGMMA_TF32(64,
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31",
                     "%32, %33, %34, %35", "%36", "%37", CONV3DJIT_D8(0), CONV3DJIT_D8(8), CONV3DJIT_D8(16),
                     CONV3DJIT_D8(24))
CONV3DJIT_WGMMA_TF32(128,
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63",
                     "%64, %65, %66, %67", "%68", "%69", CONV3DJIT_D8(0), CONV3DJIT_D8(8), CONV3DJIT_D8(16),
                     CONV3DJIT_D8(24), CONV3DJIT_D8(32), CONV3DJIT_D8(40), CONV3DJIT_D8(48), CONV3DJIT_D8(56))
CONV3DJIT_WGMMA_TF32(256,
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                     "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                     "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                     "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                     "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127",
                     "%128, %129, %130, %131", "%132", "%133",
                     CONV3DJIT_D8(0), CONV3DJIT_D8(8), CONV3DJIT_D8(16), CONV3DJIT_D8(24),
                     CONV3DJIT_D8(32), CONV3DJIT_D8(40), CONV3DJIT_D8(48), CONV3DJIT_D8(56),
                     CONV3DJIT_D8(64), CONV3DJIT_D8(72), CONV3DJIT_D8(80), CONV3DJIT_D8(88),
                     CONV3DJIT_D8(96), CONV3DJIT_D8(104), CONV3DJIT_D8(112), CONV3DJIT_D8(120))
#undef CONV3DJIT_WGMMA_TF32
#undef CONV3DJIT_D8

// Named accumulator sets, for kernels of several output planes (N = 64, up to 3 sets): set S is
// the PTX registers accS_0 .. accS_31, declared once at the kernel's start, which the wgmmas name
// in their register lists instead of taking 32 "+f" operands. NVVM then never sees the
// accumulators (ptxas allocates them as it would its own): on the tf32 reference kernel NVVM's
// time -20 %, ptxas's +7 %, NVRTC's work -9 % (docs/kernels/igemm_sm90.md). C++ reads a set only
// after wait<0>().
__device__ __forceinline__ void declare_sets() {
  asm volatile(".reg .f32 acc0_<32>;\n.reg .f32 acc1_<32>;\n.reg .f32 acc2_<32>;\n" ::);
}
template <int S>
__device__ __forceinline__ void mma_set(const unsigned (&a)[4], unsigned long long b, bool accumulate);
// d[0..31] = set S.
template <int S>
__device__ __forceinline__ void read_set(float (&d)[32]);

#define CONV3DJIT_R(s, i) "acc" #s "_" #i
#define CONV3DJIT_R4(s, i, j, k, l) CONV3DJIT_R(s, i) ", " CONV3DJIT_R(s, j) ", " CONV3DJIT_R(s, k) ", " CONV3DJIT_R(s, l)
#define CONV3DJIT_SET(s)                                                                                          \
  CONV3DJIT_R4(s, 0, 1, 2, 3) ", " CONV3DJIT_R4(s, 4, 5, 6, 7) ", " CONV3DJIT_R4(s, 8, 9, 10, 11) ", "             \
  CONV3DJIT_R4(s, 12, 13, 14, 15) ", " CONV3DJIT_R4(s, 16, 17, 18, 19) ", " CONV3DJIT_R4(s, 20, 21, 22, 23) ", "   \
  CONV3DJIT_R4(s, 24, 25, 26, 27) ", " CONV3DJIT_R4(s, 28, 29, 30, 31)
// "mov.f32 <to>i, <from>i;" for index i (MOV4: four indices, MOV32: 0 .. 31); `to` and `from` are
// "%" (operand i) or a set's prefix ("acc1_").
#define CONV3DJIT_MOV(to, from, i) "mov.f32 " to #i ", " from #i ";\n"
#define CONV3DJIT_MOV4(to, from, i, j, k, l) \
  CONV3DJIT_MOV(to, from, i) CONV3DJIT_MOV(to, from, j) CONV3DJIT_MOV(to, from, k) CONV3DJIT_MOV(to, from, l)
#define CONV3DJIT_MOV32(to, from)                                                                                 \
  CONV3DJIT_MOV4(to, from, 0, 1, 2, 3) CONV3DJIT_MOV4(to, from, 4, 5, 6, 7) CONV3DJIT_MOV4(to, from, 8, 9, 10, 11) \
  CONV3DJIT_MOV4(to, from, 12, 13, 14, 15) CONV3DJIT_MOV4(to, from, 16, 17, 18, 19)                                \
  CONV3DJIT_MOV4(to, from, 20, 21, 22, 23) CONV3DJIT_MOV4(to, from, 24, 25, 26, 27)                                \
  CONV3DJIT_MOV4(to, from, 28, 29, 30, 31)
#define CONV3DJIT_OUT8(i)                                                                                     \
  "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), "=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), \
      "=f"(d[i + 7])
#define CONV3DJIT_SET_OPS(s)                                                                                    \
  template <>                                                                                                   \
  __device__ __forceinline__ void mma_set<s>(const unsigned(&a)[4], unsigned long long b, bool accumulate) {   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"                                                    \
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {" CONV3DJIT_SET(s) "}, {%0, %1, %2, %3}, " \
                 "%4, p, 1, 1;\n}\n" ::"r"(a[0]),                                                                \
                 "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));                                 \
  }                                                                                                             \
  template <>                                                                                                   \
  __device__ __forceinline__ void read_set<s>(float(&d)[32]) {                                                  \
    asm volatile(CONV3DJIT_MOV32("%", "acc" #s "_")                                                             \
                 : CONV3DJIT_OUT8(0), CONV3DJIT_OUT8(8), CONV3DJIT_OUT8(16), CONV3DJIT_OUT8(24));                 \
  }
CONV3DJIT_SET_OPS(0)
CONV3DJIT_SET_OPS(1)
CONV3DJIT_SET_OPS(2)

// Set `s` (a constant once the caller's loops are unrolled) += A * B.
__device__ __forceinline__ void mma_in_set(int s, const unsigned (&a)[4], unsigned long long b, bool accumulate) {
  if (s == 0) {
    mma_set<0>(a, b, accumulate);
  } else if (s == 1) {
    mma_set<1>(a, b, accumulate);
  } else {
    mma_set<2>(a, b, accumulate);
  }
}
// d[s] = set s, for the first SETS sets.
template <int SETS>
__device__ __forceinline__ void read_sets(float (&d)[SETS][32]) {
  static_assert(SETS >= 1 && SETS <= 3, "three named sets");
  read_set<0>(d[0]);
  if constexpr (SETS > 1) read_set<1>(d[1]);
  if constexpr (SETS > 2) read_set<2>(d[2]);
}
// Set 1 = set 0.
__device__ __forceinline__ void copy_set0_to_set1() { asm volatile(CONV3DJIT_MOV32("acc1_", "acc0_") ::); }
#undef CONV3DJIT_SET_OPS
#undef CONV3DJIT_OUT8
#undef CONV3DJIT_MOV32
#undef CONV3DJIT_MOV4
#undef CONV3DJIT_MOV
#undef CONV3DJIT_SET
#undef CONV3DJIT_R4
#undef CONV3DJIT_R

}  // namespace conv3djit::wgmma
