#!/usr/bin/python3
"""Writes tiny bitsandbytes 4-bit and int8 checkpoints (Llama layout) under tests/fixtures/quant/bnb_*, packed
exactly as bitsandbytes packs them (Params4bit saved by transformers), with an independent float64
reference computed here, not by Cypris. bitsandbytes itself is not needed: its packing is written anew.

Layout (read from bitsandbytes' functional.quantize_4bit / QuantState.as_dict(packed=True) and
transformers' serialization):
- the weight [out, in] is flattened and cut into blocks of `blocksize` (64 by default); absmax[b] =
  max |w| over block b (fp32); each value times 1/absmax (fp32) is replaced by the index of the
  nearest entry of the 16-value table (NF4: get_4bit_type("nf4"); FP4: {0, 0.0625, 8, 12, 4, 6, 2, 3}
  and negatives / 12);
- `weight`: uint8 [(n + 1) / 2, 1], byte i = code[2i] << 4 | code[2i + 1];
- `weight.absmax` fp32 [blocks], or with double quantization (bnb_4bit_use_double_quant): offset =
  mean(absmax), absmax - offset quantized blockwise (blocks of 256) with the signed dynamic 8-bit map
  (create_dynamic_map): `weight.absmax` uint8 codes, `weight.nested_absmax` fp32 [ceil(blocks / 256)],
  `weight.nested_quant_map` fp32 [256], and nested_offset in the JSON;
- `weight.quant_map` fp32 [16]; `weight.quant_state.bitsandbytes__nf4|fp4`: uint8 bytes of
  json.dumps({quant_type, blocksize, dtype, shape, [nested_blocksize, nested_dtype, nested_offset]}).
Dequantized (what bitsandbytes computes, in fp32): absmax' = fp32(fp32(nested_map[c] * nested_absmax)
+ offset) when nested; w = fp32(table[q] * absmax').

Each folder: config.json, model.safetensors, expected.json as gen_quant_fixtures.py writes them
(logits of a float64 forward over the dequantized weights, greedy continuation, FNV-1a hashes of the
dequantized fp32 layers).
- int8 (LLM.int8, load_in_8bit): `weight` int8 [out, in] = round(w * 127 / SCB), `SCB` fp32 [out] = max |w|
  per row, `weight_format` uint8 0 (row-major); dequantized as int8_vectorwise_dequant: fp32(fp32(q * SCB)
  * fp32(1 / 127)).

Run: /usr/bin/python3 tests/tools/gen_bnb_fixtures.py [NAME ...]  (needs python3-numpy)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_quant_fixtures as gq  # noqa: E402
from fixture_common import make_with_some_seed  # noqa: E402

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
FP4 = (np.array([0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, 0, -0.0625, -8, -12, -4, -6, -2, -3], dtype=np.float32)
       / np.float32(12.0)).astype(np.float32)


def dynamic_map():
    """bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), in fp32."""
    data = []
    for i in range(7):
        items = 2 ** i + 1
        b = np.linspace(0.1, 1, items, dtype=np.float32)
        means = ((b[:-1] + b[1:]) / np.float32(2.0)).astype(np.float32)
        scale = np.float32(10.0 ** (-6 + i))
        data += (scale * means).astype(np.float32).tolist() + (-scale * means).astype(np.float32).tolist()
    data += [0.0, 1.0]
    assert len(data) == 256
    return np.array(sorted(data), dtype=np.float32)


def nearest(table, x):
    """Index of the nearest table entry (ties to the lower entry, as bitsandbytes' `x > midpoint`)."""
    order = np.argsort(table, kind="stable")
    t = table[order].astype(np.float64)
    mids = (t[:-1] + t[1:]) / 2
    return order[np.searchsorted(mids, x.astype(np.float64), side="left")]


def quantize_4bit(W16, qtype, blocksize, nested):
    """Returns the tensors bitsandbytes saves for one layer (name suffix -> array) and the fp32
    dequantized weight."""
    out, inp = W16.shape
    flat = W16.astype(np.float32).reshape(-1)
    n = flat.size
    nb = -(-n // blocksize)
    pad = np.zeros(nb * blocksize, dtype=np.float32)
    pad[:n] = flat
    blocks = pad.reshape(nb, blocksize)
    absmax = np.abs(blocks).max(1).astype(np.float32)
    inv = (np.float32(1.0) / np.where(absmax == 0, np.float32(1.0), absmax)).astype(np.float32)
    normed = (blocks * inv[:, None]).astype(np.float32)
    table = NF4 if qtype == "nf4" else FP4
    if qtype == "nf4":
        codes = nearest(NF4, normed)
    else:  # sign bit 8, magnitude the nearest of the 8 non-negative entries
        mag = nearest(FP4[:8], np.abs(normed))
        codes = np.where((normed < 0) & (FP4[mag] != 0), mag | 8, mag)
    codes = codes.reshape(-1)[:n].astype(np.uint8)
    if n % 2:
        codes = np.concatenate([codes, np.zeros(1, dtype=np.uint8)])
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).reshape(-1, 1)
    T = {"": packed, ".quant_map": table.copy()}
    state = {"quant_type": qtype, "blocksize": blocksize, "dtype": "float16", "shape": [out, inp]}
    if nested:
        offset = np.float32(absmax.mean(dtype=np.float32))
        a = (absmax - offset).astype(np.float32)
        n2 = -(-nb // 256)
        a_pad = np.zeros(n2 * 256, dtype=np.float32)
        a_pad[:nb] = a
        a_blocks = a_pad.reshape(n2, 256)
        absmax2 = np.abs(a_blocks).max(1).astype(np.float32)
        inv2 = (np.float32(1.0) / absmax2).astype(np.float32)
        dmap = dynamic_map()
        acodes = nearest(dmap, (a_blocks * inv2[:, None]).astype(np.float32)).reshape(-1)[:nb].astype(np.uint8)
        deq_absmax = ((dmap[acodes] * np.repeat(absmax2, 256)[:nb]).astype(np.float32) + offset).astype(np.float32)
        T[".absmax"] = acodes
        T[".nested_absmax"] = absmax2
        T[".nested_quant_map"] = dmap
        state.update({"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": float(offset)})
        absmax = deq_absmax
    else:
        T[".absmax"] = absmax
    T[".quant_state.bitsandbytes__" + qtype] = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8).copy()
    deq = (table[codes[:n].astype(np.int64)] * np.repeat(absmax, blocksize)[:n]).astype(np.float32)
    return T, deq.reshape(out, inp)


INV127 = np.float32(7.874015718698502e-3)  # bitsandbytes' int8_vectorwise_dequant constant


def quantize_int8(W16):
    """LLM.int8 weights as bitsandbytes' int8_vectorwise_quant stores them: SCB = max |w| per row (fp32),
    q = round(w * (127 / SCB)) as int8; dequantized (int8_vectorwise_dequant) fp32(fp32(q * SCB) / 127)."""
    W = W16.astype(np.float32)
    scb = np.abs(W).max(1).astype(np.float32)
    q = np.round(W * (np.float32(127.0) / scb)[:, None]).astype(np.int8)
    deq = ((q.astype(np.float32) * scb[:, None]).astype(np.float32) * INV127).astype(np.float32)
    return q, scb, deq


def int8_w8_blocks(q, scb):
    """What Cypris keeps an LLM.int8 layer as (W8 blocks): q as stored times the row scale
    d = fp16(fp32(SCB * fp32(1 / 127))), rounded to nearest even; d * q is exact in fp32."""
    d = (scb * INV127).astype(np.float32).astype(np.float16)
    assert (np.abs(d.astype(np.float32)) >= 2.0 ** -14).all()  # normal in fp16: the loader keeps such rows
    w8 = d.astype(np.float64)[:, None] * q.astype(np.float64)
    assert (w8.astype(np.float32).astype(np.float64) == w8).all()
    return w8


FIXTURES = {
    # name: (quant type, blocksize, nested)
    "bnb_nf4": ("nf4", 64, False),
    "bnb_nf4_double_quant": ("nf4", 64, True),
    "bnb_fp4_block128": ("fp4", 128, False),
    "bnb_int8": ("int8", None, False),
}


def make_seed(name, spec, seed):
    qtype, blocksize, nested = spec
    rng = np.random.default_rng(seed)
    cfg = dict(gq.BASE, intermediate_size=256, torch_dtype="float16")
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * (H // cfg["num_attention_heads"])
    f16 = lambda a: a.astype(np.float16)
    T = {"model.embed_tokens.weight": f16(rng.standard_normal((V, H))),
         "model.norm.weight": f16(1 + 0.1 * rng.standard_normal(H)),
         "lm_head.weight": f16(rng.standard_normal((V, H)) * H ** -0.5)}  # bitsandbytes leaves lm_head 16-bit
    R = {n: t.astype(np.float64) for n, t in T.items()}
    shapes = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (kv, H), "self_attn.v_proj": (kv, H),
              "self_attn.o_proj": (H, H), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}
    hashes, w8_hashes, w8_err = {}, {}, 0.0
    p = "model.layers.0."
    for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
        T[p + norm] = f16(1 + 0.1 * rng.standard_normal(H))
        R[p + norm] = T[p + norm].astype(np.float64)
    for lin in gq.LINEARS:
        out, inp = shapes[lin]
        W = f16(rng.standard_normal((out, inp)) * inp ** -0.5 * np.exp(rng.uniform(-1, 1, (out, 1))))
        if qtype == "int8":
            q, scb, deq = quantize_int8(W)
            T[p + lin + ".weight"] = gq.I8(q)
            T[p + lin + ".SCB"] = scb
            T[p + lin + ".weight_format"] = np.array(0, dtype=np.uint8)
            w8 = int8_w8_blocks(q, scb)
            w8_hashes[p + lin] = gq.fnv1a64(w8.astype("<f4").tobytes())
            w8_err = max(w8_err, float((np.abs(w8 - deq.astype(np.float64)) / scb.astype(np.float64)[:, None]).max()))
        else:
            tensors, deq = quantize_4bit(W, qtype, blocksize, nested)
            for suffix, t in tensors.items():
                T[p + lin + ".weight" + suffix] = t
        R[p + lin] = deq.astype(np.float64)
        hashes[p + lin] = gq.fnv1a64(deq.astype("<f4").tobytes())
    in8 = qtype == "int8"
    cfg["quantization_config"] = {
        "quant_method": "bitsandbytes", "_load_in_4bit": not in8, "_load_in_8bit": in8, "load_in_4bit": not in8,
        "load_in_8bit": in8, "bnb_4bit_quant_type": "fp4" if in8 else qtype, "bnb_4bit_use_double_quant": nested,
        "bnb_4bit_compute_dtype": "float16", "bnb_4bit_quant_storage": "uint8",
        "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False,
        "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0}
    ids = rng.integers(0, V, 16).tolist()
    _, gap = gq.greedy(cfg, R, ids[:12], 8)
    if gap < gq.MIN_GREEDY_GAP:
        return False
    extra = {"w8_fnv1a64": w8_hashes} if qtype == "int8" else None
    gq.write_fixture(name, cfg, T, R, hashes, ids, extra=extra)
    if qtype == "int8":
        print(name, "W8 blocks: max |d16 q - bitsandbytes' value| / SCB =", w8_err, "(bound 2^-11 =", 2.0 ** -11, ")")
    return True


def main():
    only = set(sys.argv[1:])
    for name, spec in FIXTURES.items():
        if only and name not in only:
            continue
        make_with_some_seed(name, lambda seed: make_seed(name, spec, seed))


if __name__ == "__main__":
    sys.exit(main())
