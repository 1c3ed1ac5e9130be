#!/usr/bin/python3
"""Writes tiny EXL2 checkpoints (exllamav2's format, Llama layout) under tests/fixtures/quant/, packed as
exllamav2's converter packs them, with an independent float64 reference computed here, not by Cypris.

The format (read from exllamav2's conversion and kernels, written anew here). A linear layer of `out`
outputs and `in` inputs is quantized in the input order of a permutation `perm` (act-order: the most
important input rows first); packed row k' is input row perm[k']. The packed rows are cut into groups,
each with its own bit width (2, 3, 4, 5, 6 or 8), in descending order of bits:
- q_invperm [in] int32: argsort(perm) (q_perm [in], when present, is perm).
- q_groups [2 * groups] int16: per group (bits, first row of q_weight the group's values start at).
- q_weight [qrows, out_p] int32 (out_p = out rounded up to 32): per group and output column, the
  group's values as one little-endian bit stream over consecutive q_weight rows: the value of the
  group's row r at bit r * bits (pack_columns; a 3-, 5- or 6-bit value may straddle two words).
  Values are unsigned, q in [0, 2^bits - 1], zero point 2^(bits - 1).
- q_scale [groups, out_p / 8] int32: a 4-bit scale code c per (group, output), 8 per word, output n at
  bit 4 * (n % 8) (pack_rows_4 stores the quantizer's qscale - 1, so c = qscale - 1 in [0, 15]).
- q_scale_max [groups] fp16: the group's largest scale.
Dequantization, as exllamav2's kernels do it (dq_scale with q_scale_max premultiplied by 1/256):
  s = fp16(fp16((c + 1)^2) * fp16(q_scale_max / 256)),   w[n, perm[k']] = (q[k', n] - 2^(bits-1)) * s
(s an fp16 value, so w is exact in fp32). config.json: quantization_config {quant_method exl2, version,
bits (average bits per weight), head_bits, calibration}.

Each folder: config.json, model.safetensors, expected.json as gen_quant_fixtures.py writes it
("input_ids", "logits" of a float64 forward over the dequantized weights, "greedy", "dequant_fnv1a64"
{layer: FNV-1a 64 of the [out, in] fp32 dequantized weight}) plus "groups" {layer: [[bits, rows], ...]}.
Run: /usr/bin/python3 tests/tools/gen_exl2_fixtures.py  (needs python3-numpy)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import make_with_some_seed  # noqa: E402
from gen_quant_fixtures import BASE, LINEARS, MIN_GREEDY_GAP, OUT, fnv1a64, forward, greedy, write_safetensors  # noqa: E402

# Per layer and linear: the groups (bits, rows) along the permuted inputs, descending bits as the
# converter orders them. Together: every width exllamav2 has (8, 6, 5, 4, 3, 2), groups of 32 to 128
# rows, several groups of one width.
PLANS = [
    {"self_attn.q_proj": [(8, 32), (6, 32), (4, 64)], "self_attn.k_proj": [(6, 32), (5, 32), (3, 64)],
     "self_attn.v_proj": [(8, 64), (4, 32), (2, 32)], "self_attn.o_proj": [(5, 32), (4, 32), (3, 32), (2, 32)],
     "mlp.gate_proj": [(4, 64), (4, 64)], "mlp.up_proj": [(8, 32), (3, 96)], "mlp.down_proj": [(6, 64), (2, 64)]},
    {"self_attn.q_proj": [(4, 32), (3, 32), (2, 64)], "self_attn.k_proj": [(8, 32), (8, 32), (6, 64)],
     "self_attn.v_proj": [(5, 64), (5, 64)], "self_attn.o_proj": [(6, 32), (4, 96)],
     "mlp.gate_proj": [(3, 128)], "mlp.up_proj": [(5, 32), (2, 96)], "mlp.down_proj": [(8, 32), (4, 32), (3, 64)]},
]
HEAD_PLAN = [(6, 32), (6, 32), (6, 64)]  # lm_head at head_bits 6


def f16(a):
    return np.asarray(a, dtype=np.float16)


def scale_of(code, qmax):
    """exllamav2's dq_scale: fp16((c + 1)^2) * fp16(q_scale_max / 256), rounded to fp16."""
    pre = f16(qmax.astype(np.float64) / 256.0).astype(np.float64)
    return f16(((code + 1) ** 2).astype(np.float64) * pre).astype(np.float64)


def quantize_group(Wg, bits):
    """exllamav2's AdaptiveQuantizer.find_params without the p search (p = 1): Wg [rows, out]."""
    maxq = 2 ** bits - 1
    xmax = np.abs(Wg).max(0) + 1e-12
    base = xmax / (maxq / 2)
    qmax = f16(base.max())
    code = np.clip(np.round(np.sqrt(base / float(qmax)) * 16), 1, 16).astype(np.int64) - 1
    s = scale_of(code, np.full(code.shape, qmax))
    q = np.clip(np.round(Wg / s[None, :]) + 2 ** (bits - 1), 0, maxq).astype(np.int64)
    return q, code, qmax


def pack_stream(q, bits):
    """pack_columns: q [rows, out] -> [rows * bits / 32, out] uint32, row r at bit r * bits."""
    rows, out = q.shape
    assert rows * bits % 32 == 0
    words = np.zeros((rows * bits // 32 + 1, out), dtype=np.uint64)
    for r in range(rows):
        pos = r * bits
        w, sh = pos // 32, pos % 32
        v = q[r].astype(np.uint64) << np.uint64(sh)
        words[w] |= v & np.uint64(0xFFFFFFFF)
        words[w + 1] |= v >> np.uint64(32)
    return words[:-1].astype(np.uint32)


def quantize_layer(W, plan, rng):
    """Returns the checkpoint tensors of one layer and its dequantized [out, in] weight (float64)."""
    out, inp = W.shape
    assert sum(r for _, r in plan) == inp
    perm = np.argsort(-rng.uniform(size=inp), kind="stable")  # act-order: an importance ranking
    invperm = np.argsort(perm)
    Wp = W.T[perm]  # [in, out] in packed order
    out_p = -(-out // 32) * 32
    deq_p = np.zeros((inp, out))
    qweights, codes, qmaxes, groups = [], [], [], []
    row, qrow = 0, 0
    for bits, rows in plan:
        q, code, qmax = quantize_group(Wp[row:row + rows], bits)
        deq_p[row:row + rows] = (q - 2 ** (bits - 1)) * scale_of(code, np.full(code.shape, qmax))[None, :]
        qp = np.full((rows, out_p), 2 ** (bits - 1), dtype=np.int64)  # padding columns hold the zero
        qp[:, :out] = q
        qweights.append(pack_stream(qp, bits))
        cp = np.zeros(out_p, dtype=np.int64)
        cp[:out] = code
        codes.append(cp)
        qmaxes.append(qmax)
        groups += [bits, qrow]
        row += rows
        qrow += rows * bits // 32
    code = np.stack(codes)  # [groups, out_p]
    q_scale = np.zeros((code.shape[0], out_p // 8), dtype=np.uint64)
    for i in range(8):
        q_scale |= code[:, i::8].astype(np.uint64) << np.uint64(4 * i)
    deq = deq_p[invperm].T  # [out, in]: w[n, perm[k']] = deq_p[k', n]
    assert (deq.astype(np.float32).astype(np.float64) == deq).all()  # exact in fp32
    tensors = {"q_invperm": invperm.astype(np.int32), "q_groups": np.array(groups, dtype=np.int16),
               "q_weight": np.concatenate(qweights).view(np.int32), "q_scale": q_scale.astype(np.uint32).view(np.int32),
               "q_scale_max": f16(qmaxes)}
    bits_total = sum(b * r for b, r in plan) * out
    return tensors, deq, bits_total


def make_seed(name, seed):
    rng = np.random.default_rng(seed)
    cfg = dict(BASE, num_hidden_layers=len(PLANS))
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * (H // cfg["num_attention_heads"])
    shapes = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (kv, H), "self_attn.v_proj": (kv, H),
              "self_attn.o_proj": (H, H), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}
    T = {"model.embed_tokens.weight": f16(rng.standard_normal((V, H))),
         "model.norm.weight": f16(1 + 0.1 * rng.standard_normal(H))}
    R = {n: t.astype(np.float64) for n, t in T.items()}
    hashes, groups, bits_total, weights = {}, {}, 0, 0

    def add(prefix, W, plan):
        nonlocal bits_total, weights
        tensors, deq, b = quantize_layer(W, plan, rng)
        for k, v in tensors.items():
            T[prefix + "." + k] = v
        R[prefix if prefix == "lm_head" else prefix] = deq
        hashes[prefix] = fnv1a64(deq.astype("<f4").tobytes())
        groups[prefix] = [list(g) for g in plan]
        bits_total += b
        weights += W.size

    for li, plan in enumerate(PLANS):
        p = f"model.layers.{li}."
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            T[p + norm] = f16(1 + 0.1 * rng.standard_normal(H))
            R[p + norm] = T[p + norm].astype(np.float64)
        for lin in LINEARS:
            out, inp = shapes[lin]
            add(p + lin, rng.standard_normal((out, inp)) * inp ** -0.5, plan[lin])
    add("lm_head", rng.standard_normal((V, H)) * H ** -0.5, HEAD_PLAN)
    R["lm_head.weight"] = R.pop("lm_head")
    cfg["quantization_config"] = {"quant_method": "exl2", "version": "0.2.3", "bits": round(bits_total / weights, 2),
                                  "head_bits": 6, "calibration": {"rows": 115, "length": 2048, "dataset": "(default)"}}
    ids = rng.integers(0, V, 16).tolist()
    cont, gap = greedy(cfg, R, ids[:12], 8)
    if gap < MIN_GREEDY_GAP:
        return False
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), T)
    logits = forward(cfg, R, ids)
    rows = [[float("%.9g" % v) for v in row] for row in logits.tolist()]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"input_ids": ids, "logits": rows, "greedy": cont, "dequant_fnv1a64": hashes, "groups": groups},
                  f, separators=(",", ":"))
    print(name, "seed", seed, "bpw", cfg["quantization_config"]["bits"], "max|logit|", float(np.abs(logits).max()),
          "greedy gap", round(gap, 3), "bytes", os.path.getsize(os.path.join(d, "model.safetensors")))
    return True


def main():
    name = "exl2_mixed"
    make_with_some_seed(name, lambda seed: make_seed(name, seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
