#!/usr/bin/python3
"""Writes a Llama-shaped bitsandbytes 4-bit checkpoint with random (valid) packed weights for the
whole-model CPU benchmarks, beside bench_make_gguf's GGUF files of the same shapes: speed depends only
on the types and shapes, not on the values. Embeddings, norms and lm_head are fp16, as bitsandbytes
checkpoints ship them. Layout as gen_bnb_fixtures.py describes (Params4bit saved by transformers).

  make_bench_bnb.py OUT_DIR [--quant-type nf4|fp4] [--double-quant] [--hidden 768 --ffn 2048 --layers 12
                    --heads 12 --kv-heads 12 --vocab 32000]

Defaults: the ~110M Llama of the CPU benchmarks (docs/perf/), NF4 with nested absmax (as unsloth's
*-bnb-4bit releases).
Run: /usr/bin/python3 tests/tools/make_bench_bnb.py /tmp/bnb110m --double-quant  (needs python3-numpy)
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_bnb_fixtures as gb  # noqa: E402
import gen_quant_fixtures as gq  # noqa: E402
from fixture_common import add_llama_shape_args, bench_llama_config  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--quant-type", default="nf4", choices=["nf4", "fp4"])
    ap.add_argument("--double-quant", action="store_true")
    add_llama_shape_args(ap)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    H, I, V, D = a.hidden, a.ffn, a.vocab, a.hidden // a.heads
    T = {}
    table = gb.NF4 if a.quant_type == "nf4" else gb.FP4

    def linear(prefix, out, inp):
        n = out * inp
        nb = n // 64
        T[prefix + ".weight"] = rng.integers(0, 256, ((n + 1) // 2, 1), dtype=np.uint8)
        T[prefix + ".weight.quant_map"] = table.copy()
        state = {"quant_type": a.quant_type, "blocksize": 64, "dtype": "float16", "shape": [out, inp]}
        if a.double_quant:
            T[prefix + ".weight.absmax"] = rng.integers(0, 256, nb, dtype=np.uint8)
            T[prefix + ".weight.nested_absmax"] = (rng.random(-(-nb // 256)) * 0.01 + 0.001).astype(np.float32)
            T[prefix + ".weight.nested_quant_map"] = gb.dynamic_map()
            state.update({"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.02})
        else:
            T[prefix + ".weight.absmax"] = (rng.random(nb) * 0.02 + 0.001).astype(np.float32)
        T[prefix + ".weight.quant_state.bitsandbytes__" + a.quant_type] = np.frombuffer(
            json.dumps(state).encode(), dtype=np.uint8).copy()

    T["model.embed_tokens.weight"] = (rng.standard_normal((V, H)) * 0.02).astype(np.float16)
    T["lm_head.weight"] = (rng.standard_normal((V, H)) * 0.02).astype(np.float16)
    T["model.norm.weight"] = np.ones(H, dtype=np.float16)
    for li in range(a.layers):
        p = f"model.layers.{li}."
        T[p + "input_layernorm.weight"] = np.ones(H, dtype=np.float16)
        T[p + "post_attention_layernorm.weight"] = np.ones(H, dtype=np.float16)
        for nm, rows in (("q", a.heads * D), ("k", a.kv_heads * D), ("v", a.kv_heads * D)):
            linear(p + f"self_attn.{nm}_proj", rows, H)
        linear(p + "self_attn.o_proj", H, a.heads * D)
        linear(p + "mlp.gate_proj", I, H)
        linear(p + "mlp.up_proj", I, H)
        linear(p + "mlp.down_proj", H, I)
    os.makedirs(a.out, exist_ok=True)
    gq.write_safetensors(os.path.join(a.out, "model.safetensors"), T)
    cfg = bench_llama_config(a, {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
                                 "bnb_4bit_quant_type": a.quant_type, "bnb_4bit_use_double_quant": a.double_quant,
                                 "bnb_4bit_compute_dtype": "float16", "bnb_4bit_quant_storage": "uint8"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
