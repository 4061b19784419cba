"""PyTorch on the same GPU and the same shapes as `mdlm bench kernels --backend cuda --scale bench`:
the peer for the CUDA kernels' timings (bench/cuda-run.sh runs both in one call). Each line: op,
case, dtype, mean milliseconds over CUDA events, TFLOP/s where the op has a FLOP count.
f32 matmul runs with TF32 off, as mdlm's (CUBLAS_COMPUTE_32F)."""
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")


def timed(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def report(op, case, dtype, ms, flops=None):
    tf = f"{flops / (ms * 1e-3) / 1e12:8.2f} TFLOP/s" if flops else ""
    print(f"{op:20} {case:34} {dtype:5} {ms:10.4f} ms {tf}", flush=True)


def matmuls():
    shapes = [  # label, m, n, k, transA, transB (as src/ops/matmul.ts bench cases)
        ("1024^3", 1024, 1024, 1024, False, False),
        ("2048^3", 2048, 2048, 2048, False, False),
        ("4096^3", 4096, 4096, 4096, False, False),
        ("linear forward x.W^T 8192x3072x768", 8192, 3072, 768, False, True),
        ("linear dx = dy.W 8192x768x3072", 8192, 768, 3072, False, False),
        ("linear dW = dy^T.x 768x3072x8192", 768, 3072, 8192, True, False),
    ]
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        for label, m, n, k, ta, tb in shapes:
            a = torch.randn((k, m) if ta else (m, k), device=dev, dtype=dtype)
            b = torch.randn((n, k) if tb else (k, n), device=dev, dtype=dtype)
            out = torch.empty(m, n, device=dev, dtype=dtype)
            opa, opb = (a.t() if ta else a), (b.t() if tb else b)
            report("matmul", label, name, timed(lambda: torch.matmul(opa, opb, out=out)), 2 * m * n * k)


def elementwise():
    n = 1 << 24
    x = torch.randn(n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    report("add", "16M", "bf16", timed(lambda: torch.add(x, y, out=out)), n)
    report("axpy", "16M", "bf16", timed(lambda: y.add_(x, alpha=1.0)), 2 * n)
    report("scale", "16M", "bf16", timed(lambda: torch.mul(x, 0.5, out=out)), n)
    x32 = torch.randn(n, device=dev)
    report("cast", "f32->bf16 n=16777216", "f32", timed(lambda: x32.to(torch.bfloat16)))
    report("cast", "bf16->f32 n=16777216", "f32", timed(lambda: x.to(torch.float32)))
    report("cast", "f32->f16 n=16777216", "f32", timed(lambda: x32.to(torch.float16)))


def reductions():
    x = torch.randn(8192, 2048, device=dev)
    report("reduce", "sumsq 8192x2048 (vector_norm)", "f32", timed(lambda: torch.linalg.vector_norm(x, dim=1)), 2 * x.numel())
    y = torch.randn(1, 1 << 24, device=dev)
    report("reduce", "sum 1x16M", "f32", timed(lambda: y.sum(dim=1)), y.numel())
    g = torch.randn(1 << 27, device=dev)
    report("grad_norm", "134M (vector_norm)", "f32", timed(lambda: torch.linalg.vector_norm(g)), 2 * g.numel())


def adamw():
    n = 1 << 27
    p = torch.nn.Parameter(torch.randn(n, device=dev))
    p.grad = torch.randn(n, device=dev) * 0.1
    opt = torch.optim.AdamW([p], lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    report("adamw", "134M (fused)", "f32", timed(opt.step), 14 * n)


def embedding():
    tokens, vocab, dim = 16384, 50304, 768
    ids = torch.randint(0, vocab, (tokens,), device=dev)
    table = torch.randn(vocab, dim, device=dev, dtype=torch.bfloat16)
    report("embedding", f"tokens {tokens} vocab {vocab} dim {dim}", "bf16", timed(lambda: F.embedding(ids, table)))
    dout = torch.randn(tokens, dim, device=dev, dtype=torch.bfloat16)
    torch.use_deterministic_algorithms(True)
    backward = torch.ops.aten.embedding_dense_backward
    report("embedding_backward", f"tokens {tokens} vocab {vocab} dim {dim}", "bf16",
           timed(lambda: backward(dout, ids, vocab, -1, False)), tokens * dim)
    torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, CUDA {torch.version.cuda}")
    for part in (matmuls, elementwise, reductions, adamw, embedding):
        part()
