import ctypes, torch, os
print("alloc conf:", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), torch.cuda.memory.get_allocator_backend())
cu = ctypes.CDLL("libcuda.so.1")
t = torch.empty(2 * 1024 * 1024, device="cuda")  # 8 MiB
u = torch.empty(1605632, device="cuda")
torch.cuda.synchronize()
for x in (t, u):
    p = x.data_ptr(); n = x.numel() * 4
    base = ctypes.c_uint64(); size = ctypes.c_size_t()
    r1 = cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(p))
    h = ctypes.c_uint64()
    r2 = cu.cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_void_p(p))
    b2 = ctypes.c_uint64(); s2 = ctypes.c_size_t()
    r3 = cu.cuMemGetAddressRange_v2(ctypes.byref(b2), ctypes.byref(s2), ctypes.c_uint64(p + n - 1))
    h2 = ctypes.c_uint64()
    r4 = cu.cuMemRetainAllocationHandle(ctypes.byref(h2), ctypes.c_void_p(p + n - 1))
    print(f"ptr {p:#x} need {n}: range r={r1} base {base.value:#x} size {size.value}; retain r={r2}; last range r={r3} base {b2.value:#x} size {s2.value}; retain last r={r4}")
