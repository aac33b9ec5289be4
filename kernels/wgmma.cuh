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

// d = (accumulate ? d : 0) + A * B for N = 32, 64 or 128 columns.
template <int N>
__device__ __forceinline__ void mma(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, bool accumulate);

template <>
__device__ __forceinline__ void mma<32>(float (&d)[16], const unsigned (&a)[4], unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void mma<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void mma<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long b,
                                         bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "
      "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
}

}  // namespace conv3djit::wgmma
