"""Hugging Face interop check: mdlm and transformers must compute the same logits from the same
checkpoint, in both directions. Run it through bench/hf_interop.sh (it checks node, dist/ and the
Python packages first); it needs torch, transformers and safetensors, no network.

  (a) HF -> mdlm: a small random LlamaForCausalLM (tied and untied), Qwen2ForCausalLM (random
      q/k/v biases) and Qwen3ForCausalLM (random per-head q/k norms) saved with save_pretrained;
      `mdlm eval --model DIR --save-logits` must give transformers' fp32 logits.
  (b) mdlm -> HF: `mdlm train --preset tiny --objective ar` for a few CPU steps (Llama tied; Llama
      untied with grouped-query attention; --model.qkvBias true as Qwen2; --model.qkNorm true as
      Qwen3); AutoModelForCausalLM.from_pretrained must load every tensor of the checkpoint into
      the architecture config.json names and give mdlm's logits.
  (c) tokenizers: AutoTokenizer.from_pretrained on an AR checkpoint (byte tokenizer; GPT-2's, a
      run with --data.tokenizer gpt2) must give the ids mdlm gives for the same text (unicode
      included), and AutoModelForCausalLM on those ids mdlm's logits.
  (d) a masked-diffusion checkpoint: config.json names MdlmForMaskedDiffusion (model_type mdlm),
      which AutoModelForCausalLM refuses instead of running it causally; AutoTokenizer's mask
      token id is config.json's mdlm.mask_token_id; the class mdlm.base_architecture names loads
      every tensor.

Pass threshold: relative error ||mdlm - hf|| / ||hf|| <= 1e-4 for the fp32 backends (cpu, webgpu).
Both sides compute in fp32 (mdlm's CPU backend even accumulates in f64), so they differ only by
rounding through ~20 dependent ops: about 1e-6. Any convention error - RoPE pairing (rotate_half vs
interleaved), the GQA head mapping, the norm epsilon, a transposed or untied head - gives errors of
order 1e-1 to 1. The cuda backend stores activations in bf16 (8-bit mantissa): 3e-2.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config, Qwen3Config

THRESHOLD = {"cpu": 1e-4, "webgpu": 1e-4, "cuda": 3e-2}
VOCAB = 264  # mdlm's byte tokenizer: 256 bytes, EOS 256, specials, padded to 264
EOS = 256
# What the tokenizer checks encode (within the byte-level runs' 64 positions): contractions, digits,
# whitespace runs, accents, Greek, CJK, emoji.
TEXT = "It's 3.14 - naïve café, Ωμέγα 你好 🙂\n\tdon't  stop"


def run(cmd, log):
    """Run a command; its output goes to the log, a failure raises with the tail of it."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write(r.stdout)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stdout[-2000:]}")
    return r.stdout


def fixed_ids(n):
    """Token ids that cover the vocabulary (bytes and specials), the same on every run."""
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, VOCAB, (n,), generator=g).tolist()
    ids[0], ids[n // 2] = EOS, VOCAB - 1
    return ids


def rope_theta_of(config):
    params = getattr(config, "rope_parameters", None)  # transformers 5
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(config.rope_theta)  # transformers 4


# architecture -> (config class, what config.json must name, extra config fields)
ARCHS = {
    "llama": (LlamaConfig, "LlamaForCausalLM", {}),
    "qwen2": (Qwen2Config, "Qwen2ForCausalLM", {"use_sliding_window": False}),
    # Qwen3's head_dim defaults to 128 whatever the hidden size: mdlm's is hidden / heads.
    "qwen3": (Qwen3Config, "Qwen3ForCausalLM", {"head_dim": 16, "attention_bias": False, "use_sliding_window": False}),
}


def save_random_model(out_dir, arch, tied):
    """A small random model with every weight (norms and biases included) far from its default, saved as HF does."""
    torch.manual_seed(2 * list(ARCHS).index(arch) + int(tied))
    config_class, _, extra = ARCHS[arch]
    common = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, hidden_act="silu",
        tie_word_embeddings=tied, initializer_range=0.1, bos_token_id=None, eos_token_id=EOS, **extra,
    )
    try:  # transformers 5 keeps RoPE settings in rope_parameters
        config = config_class(**common, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    except TypeError:  # transformers 4
        config = config_class(**common, rope_theta=10000.0)
    assert rope_theta_of(config) == 10000.0, f"rope_theta is {rope_theta_of(config)}"
    model = AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith("_proj.bias"):
                p.uniform_(-0.5, 0.5)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head is not tied"
    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    except TypeError:  # transformers 5 always writes safetensors and dropped the flag
        model.save_pretrained(out_dir)
    assert os.path.exists(os.path.join(out_dir, "model.safetensors")), "save_pretrained wrote no model.safetensors"


def load_cleanly(model_dir, model_class=AutoModelForCausalLM):
    """The model from_pretrained builds, failing unless every checkpoint tensor was used."""
    model, info = model_class.from_pretrained(model_dir, attn_implementation="eager", output_loading_info=True)
    model = model.float().eval()
    missing = [k for k in info.get("missing_keys", []) if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    problems = {k: v for k, v in (("missing", missing), ("unexpected", info.get("unexpected_keys", [])), ("mismatched", info.get("mismatched_keys", []))) if v}
    if problems:
        raise RuntimeError(f"from_pretrained({model_dir}) did not load the checkpoint cleanly: {problems}")
    if model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("tie_word_embeddings is true but lm_head was not tied to embed_tokens")
    return model


def hf_logits(model_dir, ids):
    """transformers' fp32 logits for one row of ids; every checkpoint tensor must have been used."""
    model = load_cleanly(model_dir)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def mdlm_logits(mdlm, model_dir, ids, backend, out_file, log, text=None, vocab=VOCAB):
    """mdlm's ids and logits of one causal forward: of `ids`, or of `text` tokenised by the checkpoint's tokenizer."""
    what = ["--text", text] if text is not None else ["--ids", ",".join(map(str, ids))]
    run(mdlm + ["eval", "--model", model_dir, "--objective", "ar", "--backend", backend, "--json", "--save-logits", out_file] + what, log)
    t = load_file(out_file)
    if t["ids"].dtype != np.int32 or (text is None and t["ids"].tolist() != ids):
        raise RuntimeError(f"{out_file}: ids are {t['ids'].dtype} {t['ids'].tolist()[:8]}..., expected int32 {ids[:8]}...")
    if t["logits"].dtype != np.float32 or t["logits"].shape != (len(t["ids"]), vocab):
        raise RuntimeError(f"{out_file}: logits are {t['logits'].dtype} {t['logits'].shape}, expected float32 ({len(t['ids'])}, {vocab})")
    return t["ids"].tolist(), t["logits"]


def check_mdlm_config(ck_dir, arch, tied):
    """What transformers needs from the config.json mdlm writes."""
    c = json.load(open(os.path.join(ck_dir, "config.json")))
    want = {"architectures": [ARCHS[arch][1]], "model_type": arch, "tie_word_embeddings": tied, "hidden_act": "silu", "eos_token_id": EOS, "vocab_size": VOCAB}
    bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
    if c.get("torch_dtype") != "float32" and c.get("dtype") != "float32":
        bad["torch_dtype/dtype"] = (c.get("torch_dtype"), c.get("dtype"))
    if "bos_token_id" not in c:
        bad["bos_token_id"] = "absent"
    if bad:
        raise RuntimeError(f"{ck_dir}/config.json: {bad} (expected {want}, dtype float32, bos_token_id present)")


def compare(name, backend, ours, ref):
    diff = ours.astype(np.float64) - ref.astype(np.float64)
    rel = float(np.linalg.norm(diff) / np.linalg.norm(ref.astype(np.float64)))
    worst = float(np.abs(diff).max())
    ok = bool(np.isfinite(rel)) and rel <= THRESHOLD[backend]
    print(f"{'PASS' if ok else 'FAIL'}  {name:<34} {backend:<7} max|diff| {worst:.2e}  rel {rel:.2e}  (threshold {THRESHOLD[backend]:.0e}, |logits| max {float(np.abs(ref).max()):.2f})", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--backends", default="cpu", help="mdlm backends to compare, e.g. cpu,webgpu")
    ap.add_argument("--mdlm", default="node bin/mdlm.js", help="how to run the mdlm CLI")
    ap.add_argument("--steps", type=int, default=5, help="mdlm training steps in (b)")
    args = ap.parse_args()
    mdlm = args.mdlm.split()
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in THRESHOLD:
            sys.exit(f"hf_interop: unknown backend {b}; expected some of {', '.join(THRESHOLD)}")
    os.makedirs(args.work, exist_ok=True)
    log = open(os.path.join(args.work, "hf_interop.log"), "w")
    print(f"hf_interop: torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}; mdlm backends {', '.join(backends)}; log {log.name}", flush=True)
    ids = fixed_ids(24)
    results = []

    def logits_file(name, b):
        return os.path.join(args.work, f"{name.replace(' ', '_').replace('/', '_')}-{b}.safetensors")

    def check(name, model_dir, ref):
        for b in backends:
            try:
                results.append(compare(name, b, mdlm_logits(mdlm, model_dir, ids, b, logits_file(name, b), log)[1], ref))
            except Exception as e:  # one failing case must not hide the others
                print(f"FAIL  {name:<34} {b:<7} {e}", flush=True)
                results.append(False)

    def check_tokenizer(name, ck):
        """AutoTokenizer gives mdlm's ids for TEXT, and AutoModelForCausalLM on them mdlm's logits."""
        vocab = json.load(open(os.path.join(ck, "config.json")))["vocab_size"]
        hf_ids = AutoTokenizer.from_pretrained(ck)(TEXT)["input_ids"]
        for b in backends:
            ours, logits = mdlm_logits(mdlm, ck, None, b, logits_file(name, b), log, text=TEXT, vocab=vocab)
            same = ours == hf_ids
            print(f"{'PASS' if same else 'FAIL'}  {name + ' ids':<34} {b:<7} {len(ours)} tokens{'' if same else f': mdlm {ours[:12]}..., AutoTokenizer {hf_ids[:12]}...'}", flush=True)
            results.append(same)
            results.append(compare(name + " logits", b, logits, hf_logits(ck, hf_ids)))

    # (a) HF -> mdlm
    for arch, tied in (("llama", True), ("llama", False), ("qwen2", False), ("qwen3", True)):
        name = f"hf->mdlm {arch} {'tied' if tied else 'untied'}"
        try:
            d = os.path.join(args.work, f"hf-{arch}-{'tied' if tied else 'untied'}")
            save_random_model(d, arch, tied)
            check(name, d, hf_logits(d, ids))
        except Exception as e:
            print(f"FAIL  {name:<34} {e}", flush=True)
            results.append(False)

    # (b) mdlm -> HF
    data = None
    variants = (
        ("llama", True, "tied", []),
        ("llama", False, "untied gqa", ["--model.tieEmbeddings", "false", "--model.nKvHeads", "2"]),
        ("qwen2", True, "q/k/v biases", ["--model.qkvBias", "true"]),
        ("qwen3", False, "q/k norms untied gqa", ["--model.qkNorm", "true", "--model.tieEmbeddings", "false", "--model.nKvHeads", "2"]),
    )
    for arch, tied, label, flags in variants:
        name = f"mdlm->hf {arch} {label}"
        out = os.path.join(args.work, f"mdlm-{arch}-{'tied' if tied else 'untied'}")
        try:
            cmd = mdlm + ["train", "--preset", "tiny", "--objective", "ar", "--steps", str(args.steps), "--out", out, "--backend", "cpu",
                          "--model.seqLen", "64", "--train.batchSize", "4", "--train.evalBatches", "1", "--train.warmupSteps", "1"] + flags
            if data:
                cmd += ["--data.path", data]  # the Brown corpus prepared by the first run
            run(cmd, log)
            data = data or os.path.join(out, "data")
            ck = os.path.join(out, f"step-{args.steps:07d}")
            check_mdlm_config(ck, arch, tied)
            check(name, ck, hf_logits(ck, ids))
        except Exception as e:
            print(f"FAIL  {name:<34} {e}", flush=True)
            results.append(False)

    # (c) AutoTokenizer on AR checkpoints: the byte tokenizer's (the Llama run above), GPT-2's
    for label, out, flags in (("byte", os.path.join(args.work, "mdlm-llama-tied"), None),
                              ("gpt2", os.path.join(args.work, "mdlm-gpt2"), ["--data.tokenizer", "gpt2"])):
        name = f"tokenizer {label}"
        try:
            if flags is not None:
                run(mdlm + ["train", "--preset", "tiny", "--objective", "ar", "--steps", str(args.steps), "--out", out, "--backend", "cpu",
                            "--model.seqLen", "64", "--train.batchSize", "4", "--train.evalBatches", "1", "--train.warmupSteps", "1"] + flags, log)
            check_tokenizer(name, os.path.join(out, f"step-{args.steps:07d}"))
        except Exception as e:
            print(f"FAIL  {name:<34} {e}", flush=True)
            results.append(False)

    # (d) a masked-diffusion checkpoint
    name = "mdlm diffusion checkpoint"
    try:
        out = os.path.join(args.work, "mdlm-diffusion")
        run(mdlm + ["train", "--preset", "tiny", "--objective", "mdlm", "--steps", str(args.steps), "--out", out, "--backend", "cpu",
                    "--model.seqLen", "64", "--train.batchSize", "4", "--train.evalBatches", "1", "--train.warmupSteps", "1"]
            + (["--data.path", data] if data else []), log)
        ck = os.path.join(out, f"step-{args.steps:07d}")
        c = json.load(open(os.path.join(ck, "config.json")))
        problems = []
        if c.get("architectures") != ["MdlmForMaskedDiffusion"] or c.get("model_type") != "mdlm":
            problems.append(f"config.json names {c.get('architectures')} / model_type {c.get('model_type')}")
        try:
            AutoModelForCausalLM.from_pretrained(ck)
            problems.append("AutoModelForCausalLM loaded it (it would run a bidirectional model causally)")
        except Exception:
            pass
        mask = AutoTokenizer.from_pretrained(ck).mask_token_id
        if mask != c["mdlm"]["mask_token_id"]:
            problems.append(f"AutoTokenizer's mask_token_id is {mask}, config.json's mdlm.mask_token_id {c['mdlm']['mask_token_id']}")
        load_cleanly(ck, getattr(transformers, c["mdlm"]["base_architecture"]))
        print(f"{'FAIL' if problems else 'PASS'}  {name:<34} {'; '.join(problems) or 'refused by AutoModelForCausalLM; one mask id ' + str(mask) + '; ' + c['mdlm']['base_architecture'] + ' loads every tensor'}", flush=True)
        results.append(not problems)
    except Exception as e:
        print(f"FAIL  {name:<34} {e}", flush=True)
        results.append(False)

    passed = sum(results)
    verdict = "PASS" if results and all(results) else "FAIL"
    print(f"hf_interop: {verdict} ({passed}/{len(results)} comparisons passed)", flush=True)
    sys.exit(0 if verdict == "PASS" else 1)


if __name__ == "__main__":
    main()
