#!/usr/bin/python3
"""Writes tiny quantized MoE checkpoints under tests/fixtures/quant/: the repo's Mixtral and Qwen2-MoE
family fixtures (tests/tools/gen_family_fixtures.py: configs, random weights, the float64 forward
written from transformers' modeling_mixtral / modeling_qwen2_moe) made wide enough for 32-value
blocks, with every linear layer (attention, each expert's w1/w2/w3 or gate/up/down_proj, Qwen2-MoE's
shared expert and dense MLP) packed as the reference quantizers pack them (gen_quant_fixtures.py:
AutoGPTQ's QuantLinear.pack, AutoAWQ's WQLinear_GEMM). The routers (`gate`, `shared_expert_gate`),
embeddings, norms, biases and lm_head stay fp16, as in the Hub's GPTQ/AWQ MoE checkpoints.

Each folder as gen_quant_fixtures.py writes them: config.json with quantization_config,
model.safetensors, expected.json {"input_ids", "logits" (float64 forward over the dequantized
weights), "greedy" (8 tokens after the first 12 ids), "dequant_fnv1a64" {layer: hash of the [out, in]
fp32 dequantized weight}, "min_router_gap"}. A seed is kept only when the greedy continuation has a
top-1 lead of 5% of the largest logit and every token's k-th and (k+1)-th router logits differ by at
least MIN_ROUTER_GAP (so 8-bit activations cannot change which experts a token goes to).
Run: /usr/bin/python3 tests/tools/gen_quant_moe_fixtures.py [NAME ...]  (needs python3-numpy, python3-torch)
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_family_fixtures as fam  # noqa: E402
import gen_quant_fixtures as gq  # noqa: E402
from fixture_common import make_with_some_seed  # noqa: E402

# 32-value blocks need rows of whole blocks: hidden 64 (4 heads of 16), expert width 64.
WIDE = {"hidden_size": 64, "intermediate_size": 64, "torch_dtype": "float16"}
MIXTRAL = dict(fam.MIXTRAL, **WIDE)
QWEN2_MOE = dict(fam.QWEN2_MOE, **WIDE, moe_intermediate_size=64, shared_expert_intermediate_size=64)

FIXTURES = {
    # name: (config, method, bits, group, v1 zeros)
    "gptq_w4_g32_mixtral": (MIXTRAL, "gptq", 4, 32, True),
    "awq_w4_g64_qwen2_moe": (QWEN2_MOE, "awq", 4, 64, False),
}

MIN_ROUTER_GAP = 0.1  # router logits (fp16 router, |logit| ~ 8): far more than 8-bit activations move them


def quantized(name):
    """The linear layers a GPTQ/AWQ MoE checkpoint quantizes (not the routers, lm_head, embeddings)."""
    if not name.endswith(".weight") or ".gate.weight" in name or "shared_expert_gate" in name:
        return False
    return "_proj." in name or any(name.endswith(f".{w}.weight") for w in ("w1", "w2", "w3"))


def router_gaps(cfg, R, ids):
    """The smallest gap between the k-th and (k+1)-th router logit over every token and MoE layer."""
    gaps = []
    original = fam.sparse_moe

    def recording(cfg_, W, h, p):
        block, count_key, _ = fam.moe_names(cfg_)
        logits = h @ W[p + block + "gate.weight"].double().T
        top = torch.sort(logits, dim=-1, descending=True).values
        k = cfg_["num_experts_per_tok"]
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))
        return original(cfg_, W, h, p)

    fam.sparse_moe = recording
    try:
        fam.qwen3_forward(cfg, R, ids)
    finally:
        fam.sparse_moe = original
    return min(gaps)


def greedy(cfg, R, prompt, n):
    """The continuation, its smallest top-1 lead (relative to the row's largest |logit|) and the
    smallest router gap along it."""
    ids, gap, rgap = list(prompt), float("inf"), float("inf")
    for _ in range(n):
        row = fam.qwen3_forward(cfg, R, ids)[-1].numpy()
        rgap = min(rgap, router_gaps(cfg, R, ids))
        top = np.sort(row)[-2:]
        gap = min(gap, (top[1] - top[0]) / np.abs(row).max())
        ids.append(int(row.argmax()))
    return ids[len(prompt):], gap, rgap


def make_seed(name, spec, seed):
    cfg, method, bits, group, v1 = spec
    cfg = dict(cfg)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    weights = fam.qwen3_weights(cfg, gen)
    T, R, hashes = {}, {}, {}
    for n, w in weights.items():
        W = w.double().numpy()
        if not quantized(n):
            T[n] = W.astype(np.float16)
            R[n] = torch.from_numpy(T[n].astype(np.float64))
            continue
        q, zeros, scales, g_idx = gq.quantize(W, bits, group, False, rng, False)
        deq = gq.dequantize(q, zeros, scales, g_idx)
        assert (deq.astype(np.float32).astype(np.float64) == deq).all()  # exact in fp32
        layer = n[:-len(".weight")]
        R[n] = torch.from_numpy(deq)
        hashes[layer] = gq.fnv1a64(deq.astype("<f4").tobytes())
        if method == "gptq":
            qweight, qzeros = gq.pack_gptq(q, zeros, bits, v1)
            T[layer + ".g_idx"] = g_idx.astype(np.int32)
        else:
            qweight, qzeros = gq.pack_awq(q, zeros)
        T[layer + ".qweight"], T[layer + ".qzeros"], T[layer + ".scales"] = qweight, qzeros, scales
    if method == "gptq":
        qc = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": False, "sym": False,
              "damp_percent": 0.01, "true_sequential": True, "checkpoint_format": "gptq" if v1 else "gptq_v2"}
    else:
        qc = {"quant_method": "awq", "bits": bits, "group_size": group, "zero_point": True, "version": "gemm"}
    cfg["quantization_config"] = qc
    ids = torch.randint(0, cfg["vocab_size"], (16,), generator=gen).tolist()
    cont, gap, rgap = greedy(cfg, R, ids[:12], 8)
    rgap = min(rgap, router_gaps(cfg, R, ids))
    if gap < gq.MIN_GREEDY_GAP or rgap < MIN_ROUTER_GAP:
        return False
    d = os.path.join(gq.OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    gq.write_safetensors(os.path.join(d, "model.safetensors"), T)
    logits = fam.qwen3_forward(cfg, R, ids)
    rows = [[float("%.9g" % v) for v in row] for row in logits.tolist()]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"input_ids": ids, "logits": rows, "greedy": cont, "dequant_fnv1a64": hashes,
                   "min_router_gap": rgap}, f, separators=(",", ":"))
    print(name, "seed", seed, "max|logit|", float(logits.abs().max()), "greedy gap", round(gap, 3), "router gap",
          round(rgap, 3), "bytes", os.path.getsize(os.path.join(d, "model.safetensors")))
    return True


def main():
    only = set(sys.argv[1:])
    for name, spec in FIXTURES.items():
        if only and name not in only:
            continue
        make_with_some_seed(name, lambda seed: make_seed(name, spec, seed), 200, "no seed without near ties")


if __name__ == "__main__":
    sys.exit(main())
