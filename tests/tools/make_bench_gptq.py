#!/usr/bin/python3
"""Writes a Llama-shaped GPTQ checkpoint with random (valid) packed weights for the whole-model CPU
benchmarks, beside bench_make_gguf's GGUF files of the same shapes: speed depends only on the types
and shapes, not on the values. Embeddings, norms and lm_head are fp16, as GPTQ checkpoints ship them.

  make_bench_gptq.py OUT_DIR [--bits 4] [--group 128] [--act-order] [--hidden 768 --ffn 2048 --layers 12 --heads 12
                     --kv-heads 12 --vocab 32000]

Defaults: the ~110M Llama of the CPU benchmarks (docs/perf/). Packing as AutoGPTQ's QuantLinear.pack
(see gen_quant_fixtures.py), checkpoint_format gptq (v1), sym, g_idx in order (--act-order: desc_act true,
each layer's g_idx a random permutation's groups, as AutoGPTQ writes them).
Run: /usr/bin/python3 tests/tools/make_bench_gptq.py /tmp/gptq110m  (needs python3-numpy)
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import add_llama_shape_args, bench_llama_config, write_safetensors_entries  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bits", type=int, default=4, choices=[2, 4, 8])
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--act-order", action="store_true")
    add_llama_shape_args(ap)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    H, I, V, D = a.hidden, a.ffn, a.vocab, a.hidden // a.heads
    per = 32 // a.bits
    tensors = {}  # name -> (dtype tag, shape, bytes)

    def put(name, arr, tag):
        tensors[name] = (tag, list(arr.shape), np.ascontiguousarray(arr).tobytes())

    def linear(prefix, out, inp):
        g = inp if a.group == -1 else a.group
        put(prefix + ".qweight", rng.integers(-2**31, 2**31, (inp // per, out), dtype=np.int64).astype(np.int32), "I32")
        zeros = np.full((inp // g, out), 2 ** (a.bits - 1) - 1, dtype=np.uint64)  # sym, stored zero - 1
        qz = np.zeros((inp // g, out // per), dtype=np.uint64)
        for j in range(per):
            qz |= zeros[:, j::per] << np.uint64(a.bits * j)
        put(prefix + ".qzeros", qz.astype(np.uint32).view(np.int32), "I32")
        put(prefix + ".scales", (rng.random((inp // g, out)) * 0.02 + 0.001).astype(np.float16), "F16")
        g_idx = (np.arange(inp) // g).astype(np.int32)
        if a.act_order:
            g_idx = g_idx[np.argsort(rng.permutation(inp))]  # column perm[i] in group i // g
        put(prefix + ".g_idx", g_idx, "I32")

    put("model.embed_tokens.weight", (rng.standard_normal((V, H)) * 0.02).astype(np.float16), "F16")
    put("lm_head.weight", (rng.standard_normal((V, H)) * 0.02).astype(np.float16), "F16")
    put("model.norm.weight", np.ones(H, dtype=np.float16), "F16")
    for li in range(a.layers):
        p = f"model.layers.{li}."
        put(p + "input_layernorm.weight", np.ones(H, dtype=np.float16), "F16")
        put(p + "post_attention_layernorm.weight", np.ones(H, dtype=np.float16), "F16")
        for n, rows in (("q", a.heads * D), ("k", a.kv_heads * D), ("v", a.kv_heads * D)):
            linear(p + f"self_attn.{n}_proj", rows, H)
        linear(p + "self_attn.o_proj", H, a.heads * D)
        linear(p + "mlp.gate_proj", I, H)
        linear(p + "mlp.up_proj", I, H)
        linear(p + "mlp.down_proj", H, I)
    os.makedirs(a.out, exist_ok=True)
    off = write_safetensors_entries(os.path.join(a.out, "model.safetensors"), tensors)
    cfg = bench_llama_config(a, {"quant_method": "gptq", "bits": a.bits, "group_size": a.group, "desc_act": a.act_order,
                                   "sym": True, "checkpoint_format": "gptq"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(a.out, off // (1 << 20), "MiB")


if __name__ == "__main__":
    main()
