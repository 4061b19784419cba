"""The PyTorch peer of `mdlm bench train` (src/bench/train.ts runs it in the same command).

The same model as src/model/llama.ts (RMSNorm pre-norm blocks, RoPE as Hugging Face Llama's
rotate-half, grouped-query attention through scaled_dot_product_attention, SwiGLU, tied or untied
LM head) and the same objective (ar: next-token cross-entropy; mdlm: absorbing-state masking with
the linear schedule, antithetic noise levels in [t-min, t-max), weight 1/t on masked tokens, at
least one masked token per sequence, the sum normalised by the token count), trained as a PyTorch
user would: f32 parameters under bf16 autocast, fused AdamW with weight decay on the matrices
(as mdlm: the embedding too, not the norms), global-norm clipping, the loss read back every step (mdlm reads it back too).

--mode eager runs the model as is; --mode compile wraps the loss function in torch.compile (its
compilation falls in the warmup steps). Prints one JSON line with the keys of mdlm's report.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["eager", "compile"], required=True)
    p.add_argument("--objective", choices=["ar", "mdlm"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--d-model", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--ffn", type=int, required=True)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--tie-embeddings", action="store_true")
    p.add_argument("--t-min", type=float, default=1e-3)
    p.add_argument("--t-max", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--flops-per-token", type=float, required=True, help="mdlm's count, so MFU is computed the same way")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # In f32, as Hugging Face Llama does, then back to the activations' dtype.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * h).to(x.dtype)


def rope_tables(seq_len, head_dim, theta, device):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    # x [B, H, T, D]; cos, sin [T, D]
    return (x * cos + rotate_half(x) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, a, out_std):
        super().__init__()
        self.heads, self.kv_heads = a.heads, a.kv_heads
        self.head_dim = a.d_model // a.heads
        self.q = nn.Linear(a.d_model, a.heads * self.head_dim, bias=False)
        self.k = nn.Linear(a.d_model, a.kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(a.d_model, a.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(a.heads * self.head_dim, a.d_model, bias=False)
        nn.init.normal_(self.o.weight, std=out_std)

    def forward(self, x, cos, sin, causal):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=self.kv_heads != self.heads)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))


class Mlp(nn.Module):
    def __init__(self, a, out_std):
        super().__init__()
        self.gate = nn.Linear(a.d_model, a.ffn, bias=False)
        self.up = nn.Linear(a.d_model, a.ffn, bias=False)
        self.down = nn.Linear(a.ffn, a.d_model, bias=False)
        nn.init.normal_(self.down.weight, std=out_std)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, a, out_std):
        super().__init__()
        self.attn_norm = RMSNorm(a.d_model, a.norm_eps)
        self.attn = Attention(a, out_std)
        self.mlp_norm = RMSNorm(a.d_model, a.norm_eps)
        self.mlp = Mlp(a, out_std)

    def forward(self, x, cos, sin, causal):
        x = x + self.attn(self.attn_norm(x), cos, sin, causal)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        out_std = a.init_std / math.sqrt(2 * a.layers)
        self.embed = nn.Embedding(a.vocab, a.d_model)
        self.blocks = nn.ModuleList(Block(a, out_std) for _ in range(a.layers))
        self.norm = RMSNorm(a.d_model, a.norm_eps)
        self.head = nn.Linear(a.d_model, a.vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2 and not name.endswith(("o.weight", "down.weight")):
                nn.init.normal_(p, std=a.init_std)
        if a.tie_embeddings:
            self.head.weight = self.embed.weight
        cos, sin = rope_tables(a.seq_len, a.d_model // a.heads, a.rope_theta, a.device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids, causal):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin, causal)
        return self.head(self.norm(x))


def make_loss_fn(model, a):
    V = a.vocab

    def ar_loss(tokens, targets, weights):
        logits = model(tokens, True)
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    def mdlm_loss(noised, targets, weights):
        logits = model(noised, False)
        ce = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none")
        return (ce * weights.view(-1)).sum() / targets.numel()

    return ar_loss if a.objective == "ar" else mdlm_loss


def make_batch(a, gen, mask_id):
    B, T = a.batch, a.seq_len
    window = torch.randint(0, mask_id, (B, T + 1), device=a.device, generator=gen)
    tokens, nxt = window[:, :-1], window[:, 1:]
    if a.objective == "ar":
        return tokens, nxt, None
    # Antithetic noise levels: t_i = t_min + (t_max - t_min) · ((u + i/B) mod 1); linear schedule,
    # so each token is masked with probability t and a masked token weighs 1/t.
    u = torch.rand((), device=a.device, generator=gen)
    t = a.t_min + (a.t_max - a.t_min) * torch.remainder(u + torch.arange(B, device=a.device) / B, 1.0)
    mask = torch.rand((B, T), device=a.device, generator=gen) < t[:, None]
    forced = torch.randint(0, T, (B,), device=a.device, generator=gen)
    mask[torch.arange(B, device=a.device), forced] |= ~mask.any(dim=1)
    noised = torch.where(mask, torch.full_like(tokens, mask_id), tokens)
    weights = mask.float() / t[:, None]
    return noised, tokens, weights


def main():
    a = parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    model = Llama(a).to(dev)
    # As mdlm: weight decay on every matrix (the embedding too), none on the norms.
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    fused = dev.type == "cuda"
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=a.lr, betas=(a.beta1, a.beta2), eps=1e-8, fused=fused,
    )
    loss_fn = make_loss_fn(model, a)
    if a.mode == "compile":
        loss_fn = torch.compile(loss_fn)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    mask_id = a.vocab - 1

    def step():
        batch = make_batch(a, gen, mask_id)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = loss_fn(*batch)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(a.warmup):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    total = 0.0
    for _ in range(a.steps):
        total += step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    ms_step = (time.perf_counter() - started) * 1000 / a.steps
    tokens_per_s = a.batch * a.seq_len / (ms_step / 1000)
    peak = torch.cuda.max_memory_reserved() if dev.type == "cuda" else 0
    allocated = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
    print(json.dumps({
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * a.flops_per_token / (a.peak_tflops * 1e12) if a.peak_tflops else None,
        "ms_step": ms_step,
        # Reserved by the caching allocator: what the process holds, as mdlm's pool bytes are.
        "peak_mem_gib": peak / 2**30,
        "peak_allocated_gib": allocated / 2**30,
        "impl": f"torch {torch.__version__} {a.mode}",
        "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "precision": "bf16 autocast, f32 parameters",
        "steps": a.steps,
        "loss": total / a.steps,
    }), flush=True)


if __name__ == "__main__":
    main()
