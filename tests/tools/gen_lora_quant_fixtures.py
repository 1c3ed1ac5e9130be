#!/usr/bin/python3
"""LoRA adapters over quantized bases, with float64 references: the base's dequantized weights with
each adapted layer merged as PEFT defines it (W + scale * B @ A). Nothing here comes from Cypris.

GGUF: the Llama fixture (tests/fixtures/models/llama_gqa_tied) written as a llama.cpp GGUF file with
its attention and gate/up projections in Q8_0 and in Q4_0 (as llama.cpp's quantize lays the blocks
out: Q8_0 = fp16 d + 32 int8, x = d*q, d = max|x|/127; Q4_0 = fp16 d + 16 bytes, element i in the
low nibble of byte i and element 16 + i in its high nibble, x = d*(q - 8), d = (the value of largest
magnitude)/-8), down_proj (48 inputs, no whole block) and the rest F32, q/k rows permuted like
convert_hf_to_gguf.py's LlamaModel. The adapters are the PEFT fixtures qv_r4 and all_r8_rslora of
tests/fixtures/lora/llama_gqa_tied. Written to tests/fixtures/lora/llama_gqa_tied/quant/:
base-Q8_0.gguf, base-Q4_0.gguf, and <type>/<base|adapter>/expected.json.

GPTQ: the 4-bit GPTQ fixture tests/fixtures/quant/gptq_w4_g128_v1, dequantized from its packed
tensors by the format's definition (AutoGPTQ v1: qweight int32 [in/8, out] holding 4-bit values
along the input, qzeros int32 [groups, out/8] holding zero - 1 along the output, fp16 scales, g_idx;
W[o, i] = (q - zero) * scale) -- which must reproduce that fixture's own reference logits -- with two
new PEFT adapters (qv_r4, all_r8) under tests/fixtures/lora/gptq_w4_g128_v1/.

expected.json: {"input_ids", "logits" [T][vocab], "greedy" (8 tokens after the first 12 ids)}. The
input ids are the base fixture's, or a seeded random prompt where the reference's greedy continuation
of those is too close to a tie for the base's activation rounding (pick_ids).
Run: /usr/bin/python3 tests/tools/gen_lora_quant_fixtures.py  (needs python3-torch)
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_family_fixtures as fam  # noqa: E402
import gen_llama_fixtures as lla  # noqa: E402
import gen_lora_fixtures as lf  # noqa: E402
import gen_lora_gguf_fixtures as lg  # noqa: E402

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
LLAMA = os.path.join(FIX, "models", "llama_gqa_tied")
LORA = os.path.join(FIX, "lora", "llama_gqa_tied")
OUT = os.path.join(LORA, "quant")
GPTQ = os.path.join(FIX, "quant", "gptq_w4_g128_v1")
GPTQ_OUT = os.path.join(FIX, "lora", "gptq_w4_g128_v1")

GGML_F32, GGML_Q4_0, GGML_Q8_0 = 0, 2, 8
QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj")


def f16(x):
    return torch.tensor(x, dtype=torch.float32).to(torch.float16)


def quant_q8_0(W):
    """W [rows, cols] -> (block bytes, dequantized float64)."""
    rows, cols = W.shape
    raw = bytearray()
    deq = torch.zeros(rows, cols, dtype=torch.float64)
    for r in range(rows):
        for b in range(0, cols, 32):
            x = W[r, b:b + 32].float()
            amax = float(x.abs().max())
            d = amax / 127.0
            dh = f16(d)
            q = torch.round(x / d).clamp(-127, 127).to(torch.int8) if d > 0 else torch.zeros(32, dtype=torch.int8)
            raw += dh.view(torch.int16).numpy().tobytes() + q.numpy().tobytes()
            deq[r, b:b + 32] = float(dh.float()) * q.double()
    return bytes(raw), deq


def quant_q4_0(W):
    rows, cols = W.shape
    raw = bytearray()
    deq = torch.zeros(rows, cols, dtype=torch.float64)
    for r in range(rows):
        for b in range(0, cols, 32):
            x = W[r, b:b + 32].float()
            m = float(x[int(x.abs().argmax())])
            d = m / -8.0
            dh = f16(d)
            idv = 1.0 / d if d != 0 else 0.0
            q = torch.clamp((x * idv + 8.5).floor(), 0, 15).to(torch.uint8)
            packed = (q[:16] | (q[16:] << 4)).numpy().tobytes()
            raw += dh.view(torch.int16).numpy().tobytes() + packed
            deq[r, b:b + 32] = float(dh.float()) * (q.double() - 8)
    return bytes(raw), deq


def write_gguf(path, kv, tensors):
    """kv as gen_lora_gguf_fixtures; tensors: [(name, ggml type, ne (innermost first), raw bytes)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, t, v in kv:
        out += lg.s(key.encode()) + struct.pack("<I", t)
        out += struct.pack("<I", v) if t == lg.GGUF_U32 else struct.pack("<f", v) if t == lg.GGUF_F32 else lg.s(
            v.encode())
    data = bytearray()
    for name, gtype, ne, raw in tensors:
        out += lg.s(name.encode()) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", gtype, len(data))
        data += raw
        data += b"\0" * (-len(data) % lg.ALIGN)
    out += b"\0" * (-len(out) % lg.ALIGN)
    with open(path, "wb") as f:
        f.write(out + data)


def greedy_lead(cfg, W, ids, fwd, n=8):
    """The smallest lead of the top token over the second, relative to the row's largest |logit|,
    over the n greedy steps after ids[:12]."""
    seq, lead = list(ids[:12]), float("inf")
    for _ in range(n):
        row = fwd(cfg, W, seq)[-1]
        top = torch.topk(row, 2).values
        lead = min(lead, float((top[0] - top[1]) / row.abs().max()))
        seq.append(int(row.argmax()))
    return lead


def pick_ids(cfg, W, fwd, base_ids, min_lead, vocab):
    """base_ids if their greedy continuation leads by min_lead at every step, else the first seeded
    random prompt of the same length that does: a greedy comparison holds only where the activation
    rounding of the quantized base cannot swap the top two tokens."""
    if greedy_lead(cfg, W, base_ids, fwd) >= min_lead:
        return base_ids
    for seed in range(1, 2000):
        g = torch.Generator().manual_seed(seed)
        ids = [1] + torch.randint(3, vocab, (len(base_ids) - 1,), generator=g).tolist()
        if greedy_lead(cfg, W, ids, fwd) >= min_lead:
            return ids
    raise AssertionError("no prompt with a greedy lead of %g" % min_lead)


def write_expected(d, cfg, W, ids, fwd, min_lead=0.0):
    os.makedirs(d, exist_ok=True)
    ids = pick_ids(cfg, W, fwd, ids, min_lead, cfg["vocab_size"])
    logits = fwd(cfg, W, ids)
    rows = [[float("%.7g" % v) for v in row] for row in logits.tolist()]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"input_ids": ids, "logits": rows, "greedy": fam.greedy(cfg, fwd, W, ids[:12], 8)}, f,
                  separators=(",", ":"))
    return logits


def peft_modules(d):
    sd = lg.read_peft(d)
    mods = {}
    for key in sd:
        if key.endswith(".lora_A.weight"):
            module = key[len("base_model.model."):-len(".lora_A.weight")]
            mods[module] = (sd[key].double(), sd[key.replace(".lora_A.", ".lora_B.")].double())
    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    return mods, acfg["lora_alpha"] / (acfg["r"] ** 0.5 if acfg["use_rslora"] else acfg["r"])


def fwd_llama(cfg, W, ids):
    return lla.forward(cfg, W, ids)


def gguf_bases():
    with open(os.path.join(LLAMA, "config.json")) as f:
        cfg = json.load(f)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    with open(os.path.join(LLAMA, "expected.json")) as f:
        ids = json.load(f)["input_ids"]
    W = lf.read_safetensors(os.path.join(LLAMA, "model.safetensors"))
    a = "llama."
    kv = [("general.architecture", lg.GGUF_STR, "llama"),
          (a + "context_length", lg.GGUF_U32, cfg["max_position_embeddings"]),
          (a + "embedding_length", lg.GGUF_U32, cfg["hidden_size"]),
          (a + "block_count", lg.GGUF_U32, cfg["num_hidden_layers"]),
          (a + "feed_forward_length", lg.GGUF_U32, cfg["intermediate_size"]),
          (a + "attention.head_count", lg.GGUF_U32, heads),
          (a + "attention.head_count_kv", lg.GGUF_U32, kv_heads),
          (a + "rope.dimension_count", lg.GGUF_U32, cfg["hidden_size"] // heads),
          (a + "attention.layer_norm_rms_epsilon", lg.GGUF_F32, cfg["rms_norm_eps"]),
          (a + "rope.freq_base", lg.GGUF_F32, cfg["rope_theta"]),
          (a + "vocab_size", lg.GGUF_U32, cfg["vocab_size"]),
          ("tokenizer.ggml.bos_token_id", lg.GGUF_U32, cfg["bos_token_id"]),
          ("tokenizer.ggml.eos_token_id", lg.GGUF_U32, cfg["eos_token_id"])]
    os.makedirs(OUT, exist_ok=True)
    # Greedy leads: at least twice the test's bound for the activation rounding of each type (Q8_0 2e-3,
    # Q4_0 5e-2, tests/unit/models/lora_quant_base_test.cpp).
    for tname, gtype, quant, lead in (("Q8_0", GGML_Q8_0, quant_q8_0, 0.004), ("Q4_0", GGML_Q4_0, quant_q4_0, 0.16)):
        D = {}  # the dequantized model, Hugging Face row order
        tensors = []
        for key in sorted(W):
            module = key[: -len(".weight")]
            t = W[key].float()
            leaf = module.rsplit(".", 1)[1]
            if leaf in QUANTIZED:
                # Blocks run along a row, so quantizing permuted rows = permuting quantized rows.
                _, deq = quant(t)
                D[key] = deq
                stored = t
                if leaf == "q_proj":
                    stored = lg.permute(t, heads)
                if leaf == "k_proj":
                    stored = lg.permute(t, kv_heads)
                raw, _ = quant(stored)
                tensors.append((lg.gguf_name(module) + ".weight", gtype, list(reversed(t.shape)), raw))
            else:
                D[key] = W[key]
                if leaf in ("q_proj", "k_proj"):
                    raise AssertionError(key)
                tensors.append((lg.gguf_name(module) + ".weight", GGML_F32, list(reversed(t.shape)),
                                t.contiguous().numpy().tobytes()))
        write_gguf(os.path.join(OUT, "base-%s.gguf" % tname), kv, tensors)
        base = write_expected(os.path.join(OUT, tname, "base"), cfg, D, ids, fwd_llama, lead)
        print("wrote base-%s.gguf; max|logit| %.4g" % (tname, float(base.abs().max())))
        for name in ("qv_r4", "all_r8_rslora"):
            mods, scale = peft_modules(os.path.join(LORA, name))
            M = lf.merged(D, mods, scale)
            logits = write_expected(os.path.join(OUT, tname, name), cfg, M, ids, fwd_llama, lead)
            change = float((fwd_llama(cfg, M, ids) - fwd_llama(cfg, D, ids)).abs().max())
            print("  %s: max|change| %.4g of max|logit| %.4g" % (name, change, float(logits.abs().max())))


def unpack_gptq_v1(T, module, rows_out, cols_in):
    qw = T[module + ".qweight"].to(torch.int64) & 0xFFFFFFFF  # [in/8, out]
    qz = T[module + ".qzeros"].to(torch.int64) & 0xFFFFFFFF   # [groups, out/8]
    scales = T[module + ".scales"].double()                    # [groups, out]
    g_idx = T[module + ".g_idx"].to(torch.int64)               # [in]
    shifts = torch.arange(8, dtype=torch.int64) * 4
    q = ((qw.unsqueeze(1) >> shifts.view(1, 8, 1)) & 0xF).reshape(cols_in, rows_out)  # [in, out]
    z = ((qz.unsqueeze(2) >> shifts.view(1, 1, 8)) & 0xF).reshape(qz.shape[0], rows_out) + 1  # v1: zero - 1
    return ((q - z[g_idx]).double() * scales[g_idx]).t().contiguous()  # [out, in]


def read_safetensors_any(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dt = {"F16": torch.float16, "F32": torch.float32, "I32": torch.int32, "BF16": torch.bfloat16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dt[info["dtype"]]).reshape(info["shape"])
    return out


def gptq_base():
    with open(os.path.join(GPTQ, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(GPTQ, "expected.json")) as f:
        exp = json.load(f)
    ids = exp["input_ids"]
    T = read_safetensors_any(os.path.join(GPTQ, "model.safetensors"))
    W = {}
    for key, t in T.items():
        if key.endswith(".qweight"):
            module = key[: -len(".qweight")]
            out = T[module + ".scales"].shape[1]
            W[module + ".weight"] = unpack_gptq_v1(T, module, out, t.shape[0] * 8)
        elif key.endswith(".weight"):
            W[key] = t.double()
    base = fwd_llama(cfg, W, ids)
    err = float((base - torch.tensor(exp["logits"], dtype=torch.float64)).abs().max())
    assert err < 1e-4, ("the dequantized GPTQ weights do not give the fixture's reference", err)
    for name, targets, r, alpha in (("qv_r4", ["q_proj", "v_proj"], 4, 8), ("all_r8", "all-linear", 8, 16)):
        gen = torch.Generator().manual_seed(sum(map(ord, "gptq" + name)))
        mods, scale = lf.make_adapter(W, targets, r, alpha, False, gen)
        mods = {m: (A.float().double(), B.float().double()) for m, (A, B) in mods.items()}
        d = os.path.join(GPTQ_OUT, name)
        lf.write_adapter(d, mods, {"r": r, "lora_alpha": alpha, "use_rslora": False, "target_modules": targets},
                         False)
        M = lf.merged(W, mods, scale)
        logits = write_expected(d, cfg, M, ids, fwd_llama, 0.16)
        change = float((fwd_llama(cfg, M, ids) - base).abs().max())
        print("gptq %s: max|change| %.4g of max|logit| %.4g" % (name, change, float(logits.abs().max())))


def main():
    gguf_bases()
    gptq_base()


if __name__ == "__main__":
    sys.exit(main())
