#!/usr/bin/env python3
"""Peer timing for the `attention` / `attention_backward` ops: PyTorch scaled_dot_product_attention.

Times torch.nn.functional.scaled_dot_product_attention in bf16 at the shapes of
attention.cases('bench') (parsed from src/ops/attention.ts, so the two lists cannot drift), forward
alone and backward alone (torch.autograd.grad of the same graph), and prints one JSON record per
shape and SDPA backend:

  {"shape": "B4 T2048 H16/4 D128", "causal": true, "sdpa_backend": "default", "gqa": "enable_gqa",
   "fwd_ms": ..., "fwd_tflops": ..., "bwd_ms": ..., "bwd_tflops": ..., "fwdbwd_ms": ...}

FLOPs are counted as the op's flops() does: forward 4·B·H·T²·D (QKᵀ and PV, 2 per multiply-add),
halved when causal; backward 2.5× the forward. Tensors use the op's memory layout [B, T, H, D]
(viewed as [B, H, T, D] for SDPA without a copy). Grouped-query shapes use enable_gqa=True when the
chosen backend takes it, else K/V repeated to H heads before timing (reported in "gqa").

Usage: python3 bench/peers/attention_sdpa.py [--reps 50] [--backends default,flash,cudnn,efficient]
                                             [--shapes 'B,T,H,G,D,causal;...']
"""
import argparse
import json
import os
import re
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OPS_FILE = os.path.join(HERE, '..', '..', 'src', 'ops', 'attention.ts')


def bench_cases():
    """(B, T, H, G, D, causal) of every oneDoc(...) row (one document a row: what SDPA computes) in the
    'bench' list of attentionCases; rows with documents are c(..., documents) and not timed here."""
    src = open(OPS_FILE).read()
    body = src[src.index('function attentionCases'):]
    body = body[body.index("if (scale === 'test')"):]
    body = body[body.index('}') + 1:]  # past the test list
    body = body[:body.index('];')]
    pat = re.compile(r"\boneDoc\('[^']*',\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(true|false)\)")
    cases = [(int(b), int(t), int(h), int(g), int(d), c == 'true') for b, t, h, g, d, c in pat.findall(body)]
    if not cases:
        sys.exit(f'no bench cases found in {OPS_FILE}')
    return cases


def forward_flops(B, T, H, D, causal):
    return 4.0 * B * H * T * T * D / (2 if causal else 1)


def backend_ctx(name):
    if name == 'default':
        import contextlib
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({'flash': SDPBackend.FLASH_ATTENTION, 'cudnn': SDPBackend.CUDNN_ATTENTION,
                        'efficient': SDPBackend.EFFICIENT_ATTENTION, 'math': SDPBackend.MATH}[name])


def time_ms(fn, reps, warmup=5, repeats=5):
    """Median over `repeats` of the mean time of `reps` back-to-back calls (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    results = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        results.append(start.elapsed_time(end) / reps)
    results.sort()
    return results[len(results) // 2]


def run(B, T, H, G, D, causal, backend, reps):
    dev = 'cuda'
    gen = torch.Generator(device=dev).manual_seed(0)
    # The op's layout [B, T, H, D]; SDPA wants [B, H, T, D]: a transposed view, no copy.
    q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16, generator=gen).transpose(1, 2).requires_grad_()
    k = torch.randn(B, T, G, D, device=dev, dtype=torch.bfloat16, generator=gen).transpose(1, 2).requires_grad_()
    v = torch.randn(B, T, G, D, device=dev, dtype=torch.bfloat16, generator=gen).transpose(1, 2).requires_grad_()
    dout = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16, generator=gen).transpose(1, 2)
    scale = 1.0 / D ** 0.5
    gqa = 'none'
    kk, vv = k, v
    kwargs = {}
    with backend_ctx(backend):
        if G != H:
            gqa = 'enable_gqa'
            kwargs = {'enable_gqa': True}
            try:
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **kwargs)
            except (RuntimeError, TypeError):
                gqa = 'repeat_interleave'
                kwargs = {}
                kk = k.detach().repeat_interleave(H // G, dim=1).requires_grad_()
                vv = v.detach().repeat_interleave(H // G, dim=1).requires_grad_()

        def fwd():
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, scale=scale, **kwargs)

        out = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, scale=scale, **kwargs)

        def bwd():
            return torch.autograd.grad(out, (q, kk, vv), dout, retain_graph=True)

        def fwdbwd():
            o = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, scale=scale, **kwargs)
            return torch.autograd.grad(o, (q, kk, vv), dout)

        fwd_ms = time_ms(fwd, reps)
        bwd_ms = time_ms(bwd, reps)
        fwdbwd_ms = time_ms(fwdbwd, reps)
    f = forward_flops(B, T, H, D, causal)
    label = f'B{B} T{T} H{H}' + (f'/{G}' if G != H else '') + f' D{D}'
    return {
        'shape': label, 'B': B, 'T': T, 'H': H, 'G': G, 'D': D, 'causal': causal, 'sdpa_backend': backend, 'gqa': gqa,
        'fwd_ms': round(fwd_ms, 4), 'fwd_tflops': round(f / (fwd_ms * 1e-3) / 1e12, 1),
        'bwd_ms': round(bwd_ms, 4), 'bwd_tflops': round(2.5 * f / (bwd_ms * 1e-3) / 1e12, 1),
        'fwdbwd_ms': round(fwdbwd_ms, 4), 'fwdbwd_tflops': round(3.5 * f / (fwdbwd_ms * 1e-3) / 1e12, 1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--reps', type=int, default=50)
    ap.add_argument('--backends', default='default', help='comma list of default, flash, cudnn, efficient, math')
    ap.add_argument('--shapes', default='', help="'B,T,H,G,D,causal;...' instead of the op's bench cases")
    args = ap.parse_args()
    if args.shapes:
        cases = []
        for s in args.shapes.split(';'):
            b, t, h, g, d, c = s.split(',')
            cases.append((int(b), int(t), int(h), int(g), int(d), c.strip().lower() in ('1', 'true', 'causal')))
    else:
        cases = bench_cases()
    print(json.dumps({'device': torch.cuda.get_device_name(), 'torch': torch.__version__, 'cuda': torch.version.cuda}), flush=True)
    for backend in args.backends.split(','):
        for (B, T, H, G, D, causal) in cases:
            try:
                rec = run(B, T, H, G, D, causal, backend, args.reps)
            except Exception as e:  # a backend that does not take this shape
                rec = {'shape': f'B{B} T{T} H{H}/{G} D{D}', 'causal': causal, 'sdpa_backend': backend, 'error': str(e).splitlines()[0][:200]}
            print(json.dumps(rec), flush=True)
            torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
