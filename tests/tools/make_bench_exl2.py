#!/usr/bin/python3
"""Writes a Llama-shaped EXL2 checkpoint (~4 bits per weight) with random (valid) packed weights for the
whole-model CPU benchmarks, beside bench_make_gguf's GGUF files of the same shapes: speed depends only
on the types and shapes, not on the values. Embeddings and norms are fp16; lm_head is EXL2 at 6 bits
(head_bits 6), as exllamav2's converter writes it.

  make_bench_exl2.py OUT_DIR [--hidden 768 --ffn 2048 --layers 12 --heads 12 --kv-heads 12 --vocab 32000]

Each linear layer: a random input permutation, groups of 6 bits over the first 1/12 of the inputs, 4 bits
over the next 10/12 and 3 bits over the last 1/12 (about 4.1 bits per weight with the scales), laid
out as gen_exl2_fixtures.py describes.
Run: /usr/bin/python3 tests/tools/make_bench_exl2.py /tmp/exl2-110m  (needs python3-numpy)
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
    add_llama_shape_args(ap)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    H, I, V, D = a.hidden, a.ffn, a.vocab, a.hidden // a.heads
    tensors = {}  # name -> (dtype tag, shape, bytes)
    stats = {"bits": 0, "weights": 0}

    def put(name, arr, tag):
        tensors[name] = (tag, list(arr.shape), np.ascontiguousarray(arr).tobytes())

    def linear(prefix, out, inp, plan):
        assert inp % 32 == 0 and out % 32 == 0
        put(prefix + ".q_invperm", rng.permutation(inp).astype(np.int32), "I32")
        groups, qrows, bits_total = [], 0, 0
        for bits, rows in plan:
            for r0 in range(0, rows, 32):  # groups of 32 inputs, as exllamav2's low-bit groups
                groups += [bits, qrows]
                qrows += 32 * bits // 32
                bits_total += 32 * bits
        put(prefix + ".q_groups", np.array(groups, dtype=np.int16), "I16")
        put(prefix + ".q_weight", rng.integers(-2**31, 2**31, (qrows, out), dtype=np.int64).astype(np.int32), "I32")
        ng = len(groups) // 2
        put(prefix + ".q_scale", rng.integers(-2**31, 2**31, (ng, out // 8), dtype=np.int64).astype(np.int32), "I32")
        put(prefix + ".q_scale_max", (rng.random(ng) * 0.02 + 0.01).astype(np.float16), "F16")
        stats["bits"] += bits_total * out + ng * out * 4 + ng * 16 + inp * 32
        stats["weights"] += inp * out

    def plan_of(inp, head=False):
        if head:
            return [(6, inp)]
        edge = max(32, inp // 12 // 32 * 32)
        return [(6, edge), (4, inp - 2 * edge), (3, edge)]

    put("model.embed_tokens.weight", (rng.standard_normal((V, H)) * 0.02).astype(np.float16), "F16")
    put("model.norm.weight", np.ones(H, dtype=np.float16), "F16")
    linear("lm_head", V, H, plan_of(H, head=True))
    for li in range(a.layers):
        p = f"model.layers.{li}."
        put(p + "input_layernorm.weight", np.ones(H, dtype=np.float16), "F16")
        put(p + "post_attention_layernorm.weight", np.ones(H, dtype=np.float16), "F16")
        for n, rows in (("q", a.heads * D), ("k", a.kv_heads * D), ("v", a.kv_heads * D)):
            linear(p + f"self_attn.{n}_proj", rows, H, plan_of(H))
        linear(p + "self_attn.o_proj", H, a.heads * D, plan_of(a.heads * D))
        linear(p + "mlp.gate_proj", I, H, plan_of(H))
        linear(p + "mlp.up_proj", I, H, plan_of(H))
        linear(p + "mlp.down_proj", H, I, plan_of(I))
    os.makedirs(a.out, exist_ok=True)
    off = write_safetensors_entries(os.path.join(a.out, "model.safetensors"), tensors)
    bpw = stats["bits"] / stats["weights"]
    cfg = bench_llama_config(a, {"quant_method": "exl2", "version": "0.2.3", "bits": round(bpw, 2), "head_bits": 6})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(a.out, off // (1 << 20), "MiB", "%.2f bits per weight (linear layers, scales included)" % bpw)


if __name__ == "__main__":
    main()
