#!/usr/bin/python3
"""Compares a `cypris generate --debug-dump DIR` run layer by layer with the torch reference of
gen_llama_fixtures.py, for a Llama/Mistral/Qwen2 model folder (config.json + model.safetensors).

  ./build/app/cypris generate --model M --prompt-ids 1,5,9 --max-tokens 1 --dtype float32 --debug-dump /tmp/d
  /usr/bin/python3 tests/tools/compare_dump.py M /tmp/d --ids 1,5,9

Prints, for each intermediate of the prefill (forward f0), the max abs error over max abs value;
the first large jump points at the op that differs. Logits are compared for the dumped rows only.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_llama_fixtures import forward  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        if e["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            continue
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--ids", required=True, help="the prompt ids given to cypris generate, e.g. 1,5,9")
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    W = read_safetensors(os.path.join(args.model, "model.safetensors"))
    ids = [int(x) for x in args.ids.split(",")]
    rec = {}
    forward(cfg, W, ids, rec)
    worst = 0.0
    for name, ref in rec.items():
        path = os.path.join(args.dump, f"f0.{name}.npy")
        if not os.path.exists(path):
            print(f"{name:28s} (not dumped)")
            continue
        got = torch.from_numpy(np.load(path)).double()
        ref = ref[-got.shape[0]:]  # logits: only the rows cypris computed
        err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        worst = max(worst, err)
        print(f"{name:28s} {list(got.shape)!s:14s} rel err {err:.3e}")
    print(f"worst {worst:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
