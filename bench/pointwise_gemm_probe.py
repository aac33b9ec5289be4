# cuBLAS (torch.matmul) against cuDNN (F.conv3d) on the tf32 suite's pointwise layers, both layouts:
# whether dispatching exact-GEMM layers (1x1x1, unit stride, no padding) to cuBLAS would beat cuDNN.
# The figures in docs/kernels/igemm_sm90.md ("Chunked layers", H100, 2026-12-05) were measured with
# exactly this program, on the GPU machine's PyTorch:
#   python bench/pointwise_gemm_probe.py
# Not part of the build: a standalone measurement through PyTorch (TF32 allowed in both libraries,
# cudnn.benchmark on, L2 flushed before each timed call, median of 20 CUDA-event timings).
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def median_ms(fn, iters=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


print(torch.cuda.get_device_name(), "cuDNN", torch.backends.cudnn.version())
layers = {"pointwise_128": (8, 128, 16, 56, 56, 128), "pointwise_256": (8, 256, 8, 28, 28, 256),
          "pointwise_512": (8, 512, 4, 14, 14, 2048)}
for name, (n, c, d, h, w, k) in layers.items():
    x = torch.rand(n, c, d, h, w, device="cuda") * 2 - 1
    wt = torch.rand(k, c, 1, 1, 1, device="cuda") * 2 - 1
    ref = F.conv3d(x.double(), wt.double())
    x3, w2 = x.view(n, c, -1), wt.view(k, c)  # NCDHW: each image's K x DHW output is W (K x C) @ X (C x DHW)
    y_conv, y_gemm = F.conv3d(x, wt), torch.matmul(w2, x3).view_as(ref)
    err = lambda y: ((y.double() - ref).norm() / ref.norm()).item()
    print(f"{name:14} NCDHW: cudnn {median_ms(lambda: F.conv3d(x, wt)):.4f} ms (rel-L2 {err(y_conv):.1e})  "
          f"cublas {median_ms(lambda: torch.matmul(w2, x3)):.4f} ms (rel-L2 {err(y_gemm):.1e})")
    xl = x.permute(0, 2, 3, 4, 1).contiguous().view(-1, c)  # NDHWC: (N DHW) x C @ C x K
    xc, wc = x.contiguous(memory_format=torch.channels_last_3d), wt.contiguous(memory_format=torch.channels_last_3d)
    print(f"{'':14} NDHWC: cudnn {median_ms(lambda: F.conv3d(xc, wc)):.4f}  cublas {median_ms(lambda: torch.matmul(xl, w2.t())):.4f}")
