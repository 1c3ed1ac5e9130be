#!/usr/bin/python3
"""Generates LoRA adapter fixtures under tests/fixtures/lora/ over the tiny model fixtures of
tests/fixtures/models/, with expected logits from an independent float64 reference: the base model's
reference forward (gen_llama_fixtures.py / gen_family_fixtures.py) run on the weights with each
adapted layer merged as PEFT defines it, W + scale * B @ A, scale = lora_alpha / r (or
lora_alpha / sqrt(r) with use_rslora). Nothing here comes from Cypris.

Each adapter folder is what PEFT's save_pretrained writes: adapter_config.json and
adapter_model.safetensors (one adapter as adapter_model.bin, torch.save of the state dict, as PEFT
writes with safe_serialization=False), keys
"base_model.model.<module>.lora_A.weight" [r, in] and "...lora_B.weight" [out, r]. Beside them
expected.json: {"input_ids", "logits" [T][vocab], "greedy" (8 tokens after the first 12 ids)}.
Unlike PEFT's initialisation (B = 0) both matrices are random, so every adapter changes the output.
Run: /usr/bin/python3 tests/tools/gen_lora_fixtures.py [BASE ...]  (needs python3-torch)
"""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_family_fixtures as fam  # noqa: E402
import gen_llama_fixtures as lla  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
MODELS = os.path.join(ROOT, "models")
OUT = os.path.join(ROOT, "lora")


def read_safetensors(path):
    """{name: float64 tensor} of an F32 safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(info["shape"])
        out[name] = t.double()
    return out


def linear_shapes(W):
    """{module: (out, in)} of the attention and MLP projections (PEFT's all-linear minus the head)."""
    shapes = {}
    for name, t in W.items():
        if not name.endswith(".weight") or t.dim() != 2:
            continue
        module = name[: -len(".weight")]
        if ".self_attn." in module or ".mlp." in module:
            shapes[module] = tuple(t.shape)
    return shapes


def make_adapter(W, targets, r, alpha, rslora, gen):
    """targets: the module suffixes (q_proj, ...) or "all-linear". A [r, in], B [out, r] random."""
    mods = {}
    for module, (out, inp) in sorted(linear_shapes(W).items()):
        leaf = module.rsplit(".", 1)[1]
        if targets != "all-linear" and leaf not in targets:
            continue
        A = torch.randn(r, inp, generator=gen) * inp ** -0.5
        B = torch.randn(out, r, generator=gen) * r ** -0.5 * 0.5
        mods[module] = (A, B)
    scale = alpha / math.sqrt(r) if rslora else alpha / r
    return mods, scale


def merged(W, mods, scale):
    M = dict(W)
    for module, (A, B) in mods.items():
        M[module + ".weight"] = W[module + ".weight"] + scale * (B.double() @ A.double())
    return M


def write_adapter(d, mods, cfg_extra, as_bin):
    os.makedirs(d, exist_ok=True)
    tensors = {}
    for module, (A, B) in mods.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = A.float().contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = B.float().contiguous()
    for stale in ("adapter_model.bin", "adapter_model.safetensors"):
        if os.path.exists(os.path.join(d, stale)):
            os.remove(os.path.join(d, stale))
    if as_bin:
        torch.save(tensors, os.path.join(d, "adapter_model.bin"))
    else:
        lla.write_safetensors(os.path.join(d, "adapter_model.safetensors"), tensors, torch.float32)
    cfg = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "inference_mode": True,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "modules_to_save": None, "use_dora": False,
        "use_rslora": False, "rank_pattern": {}, "alpha_pattern": {}, "init_lora_weights": True,
    }
    cfg.update(cfg_extra)
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


BASES = {
    # base fixture: (reference forward, config transform)
    "llama_gqa_tied": lambda cfg, W, ids: lla.forward(cfg, W, ids),
    "phi3_fused_longrope": fam.phi3_forward,
    "cohere_parallel_block": fam.cohere_forward,
    "qwen3_qknorm_sliding": fam.qwen3_forward,
    "gemma2_softcap_sliding": fam.gemma_forward,
}

ADAPTERS = {
    # base: [(name, targets, r, alpha, use_rslora, as_bin)]
    "llama_gqa_tied": [
        ("qv_r4", ["q_proj", "v_proj"], 4, 8, False, False),
        ("all_r8_rslora", "all-linear", 8, 16, True, False),
        ("mlp_o_r2_bin", ["o_proj", "gate_proj", "down_proj"], 2, 4, False, True),
    ],
    "phi3_fused_longrope": [("fused_r4", ["qkv_proj", "gate_up_proj", "o_proj", "down_proj"], 4, 8, False, False)],
    "cohere_parallel_block": [("qk_r4", ["q_proj", "k_proj", "up_proj"], 4, 6, False, False)],
    "qwen3_qknorm_sliding": [("all_r4", "all-linear", 4, 8, False, False)],
    "gemma2_softcap_sliding": [("qkv_down_r8", ["q_proj", "k_proj", "v_proj", "down_proj"], 8, 8, False, False)],
}


def main():
    # Bases named on the command line only (default all); each adapter's seed depends only on its names.
    chosen = sys.argv[1:] or sorted(BASES)
    for base, fwd in sorted(BASES.items()):
        if base not in chosen:
            continue
        bdir = os.path.join(MODELS, base)
        with open(os.path.join(bdir, "config.json")) as f:
            cfg = json.load(f)
        W = read_safetensors(os.path.join(bdir, "model.safetensors"))
        with open(os.path.join(bdir, "expected.json")) as f:
            exp = json.load(f)
        ids = exp["input_ids"]
        # The base reference must reproduce the base fixture (the same definitions, the same weights).
        err = float((fwd(cfg, W, ids) - torch.tensor(exp["logits"], dtype=torch.float64)).abs().max())
        assert err < 1e-4, (base, err)
        for name, targets, r, alpha, rslora, as_bin in ADAPTERS[base]:
            gen = torch.Generator().manual_seed(sum(map(ord, base + name)))
            mods, scale = make_adapter(W, targets, r, alpha, rslora, gen)
            # The reference sees the adapter as stored (fp32).
            mods = {m: (A.float().double(), B.float().double()) for m, (A, B) in mods.items()}
            M = merged(W, mods, scale)
            logits = fwd(cfg, M, ids)
            base_logits = fwd(cfg, W, ids)
            d = os.path.join(OUT, base, name)
            write_adapter(d, mods, {"r": r, "lora_alpha": alpha, "use_rslora": rslora,
                                    "target_modules": targets}, as_bin)
            rows = [[float("%.7g" % v) for v in row] for row in logits.tolist()]
            with open(os.path.join(d, "expected.json"), "w") as f:
                json.dump({"input_ids": ids, "logits": rows, "greedy": fam.greedy(cfg, fwd, M, ids[:12], 8)}, f,
                          separators=(",", ":"))
            print(base, name, "scale", scale, "max|logit|", float(logits.abs().max()),
                  "max|change|", float((logits - base_logits).abs().max()))


if __name__ == "__main__":
    sys.exit(main())
