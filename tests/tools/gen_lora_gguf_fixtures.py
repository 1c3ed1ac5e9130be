#!/usr/bin/python3
"""Writes llama.cpp GGUF versions of LoRA fixtures, as llama.cpp's convert_lora_to_gguf.py writes them,
and the Llama base fixture as a GGUF model as convert_hf_to_gguf.py writes it, all under
tests/fixtures/lora/llama_gqa_tied/gguf/ (and Phi-3's fused adapter under phi3_fused_longrope/gguf/). Nothing here comes from Cypris; the GGUF layout is written
from the format's description (version 3, little-endian, 32-byte alignment).

Adapters (from the PEFT folders gen_lora_fixtures.py wrote): metadata general.architecture "llama",
general.type "adapter", adapter.type "lora", adapter.lora.alpha (float32); per adapted weight
"blk.N.<tensor>.weight.lora_a" = PEFT's lora_A [r, in] (ggml ne [in, r]) and ".lora_b" = lora_B
[out, r] (ne [r, out]), F32. The converter passes each (A, B) pair through the base model's tensor
transforms: LlamaModel permutes the q_proj rows over num_attention_heads and the k_proj rows over
num_key_value_heads for llama.cpp's interleaved rotary, which moves B's rows (A is untouched). rsLoRA
does not survive the conversion (llama.cpp scales by alpha / r), so only the plain adapters are
converted; their expected.json (the merged float64 reference) holds for the GGUF versions too.

Base model: llama metadata keys, token_embd / blk.N.* / output_norm names, q/k rows permuted the same
way, no output.weight (tied embeddings), F32.
Run: /usr/bin/python3 tests/tools/gen_lora_gguf_fixtures.py  (needs python3-torch)
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_lora_fixtures as lf  # noqa: E402

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
BASE = os.path.join(FIX, "models", "llama_gqa_tied")
LORA = os.path.join(FIX, "lora", "llama_gqa_tied")
OUT = os.path.join(LORA, "gguf")

GGUF_U32, GGUF_F32, GGUF_STR = 4, 6, 8
GGML_F32 = 0
ALIGN = 32

LAYER = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    # Phi-3's fused projections: gguf-py's tensor map names qkv_proj attn_qkv and gate_up_proj ffn_up
    # (gate rows first, as llama.cpp's fused SwiGLU splits them); Phi3MiniModel transforms neither.
    "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
}


def gguf_name(hf_module):
    """model.layers.N.<module> -> blk.N.<tensor>; the global ones by name."""
    if hf_module == "model.embed_tokens":
        return "token_embd"
    if hf_module == "model.norm":
        return "output_norm"
    parts = hf_module.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf_module
    return "blk.%s.%s" % (parts[2], LAYER[".".join(parts[3:])])


def permute(rows, n_head):
    """LlamaModel.permute: reshape(n_head, 2, d/2, ...).swapaxes(1, 2): row h*d + 2i + s <- h*d + s*d/2 + i."""
    shape = rows.shape
    return rows.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def s(b):
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kv, tensors):
    """kv: [(key, type, value)]; tensors: [(name, float32 tensor in row-major shape)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, t, v in kv:
        out += s(key.encode()) + struct.pack("<I", t)
        if t == GGUF_U32:
            out += struct.pack("<I", v)
        elif t == GGUF_F32:
            out += struct.pack("<f", v)
        else:
            out += s(v.encode())
    data = bytearray()
    for name, t in tensors:
        ne = list(reversed(t.shape))
        out += s(name.encode()) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", GGML_F32, len(data))
        data += t.float().contiguous().numpy().tobytes()
        data += b"\0" * (-len(data) % ALIGN)
    out += b"\0" * (-len(out) % ALIGN)
    with open(path, "wb") as f:
        f.write(out + data)


def read_peft(d):
    st = os.path.join(d, "adapter_model.safetensors")
    if os.path.exists(st):
        return {k: v.float() for k, v in lf.read_safetensors(st).items()}
    return torch.load(os.path.join(d, "adapter_model.bin"), weights_only=True)


def main():
    with open(os.path.join(BASE, "config.json")) as f:
        cfg = json.load(f)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    os.makedirs(OUT, exist_ok=True)

    for name in ("qv_r4", "mlp_o_r2_bin"):
        d = os.path.join(LORA, name)
        with open(os.path.join(d, "adapter_config.json")) as f:
            acfg = json.load(f)
        assert not acfg["use_rslora"]
        sd = read_peft(d)
        tensors = []
        for key in sorted(sd):
            if not key.endswith(".lora_A.weight"):
                continue
            module = key[len("base_model.model."):-len(".lora_A.weight")]
            A = sd[key]
            B = sd[key.replace(".lora_A.", ".lora_B.")]
            if module.endswith("q_proj"):
                B = permute(B, heads)
            if module.endswith("k_proj"):
                B = permute(B, kv_heads)
            g = gguf_name(module) + ".weight"
            tensors += [(g + ".lora_a", A), (g + ".lora_b", B)]
        kv = [("general.architecture", GGUF_STR, "llama"), ("general.type", GGUF_STR, "adapter"),
              ("adapter.type", GGUF_STR, "lora"), ("adapter.lora.alpha", GGUF_F32, float(acfg["lora_alpha"]))]
        write_gguf(os.path.join(OUT, name + ".gguf"), kv, tensors)
        print("wrote", name + ".gguf", len(tensors), "tensors")

    # Phi-3 (fused qkv_proj / gate_up_proj, no permutation): its expected.json holds for the GGUF file too.
    phi3 = os.path.join(FIX, "lora", "phi3_fused_longrope")
    d = os.path.join(phi3, "fused_r4")
    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    assert not acfg["use_rslora"]
    sd = read_peft(d)
    tensors = []
    for key in sorted(sd):
        if key.endswith(".lora_A.weight"):
            module = key[len("base_model.model."):-len(".lora_A.weight")]
            g = gguf_name(module) + ".weight"
            tensors += [(g + ".lora_a", sd[key]), (g + ".lora_b", sd[key.replace(".lora_A.", ".lora_B.")])]
    kv = [("general.architecture", GGUF_STR, "phi3"), ("general.type", GGUF_STR, "adapter"),
          ("adapter.type", GGUF_STR, "lora"), ("adapter.lora.alpha", GGUF_F32, float(acfg["lora_alpha"]))]
    os.makedirs(os.path.join(phi3, "gguf"), exist_ok=True)
    write_gguf(os.path.join(phi3, "gguf", "fused_r4.gguf"), kv, tensors)
    print("wrote phi3 fused_r4.gguf", len(tensors), "tensors")

    W = lf.read_safetensors(os.path.join(BASE, "model.safetensors"))
    tensors = []
    for key in sorted(W):
        assert key.endswith(".weight"), key
        t = W[key].float()
        module = key[: -len(".weight")]
        if module.endswith("q_proj"):
            t = permute(t, heads)
        if module.endswith("k_proj"):
            t = permute(t, kv_heads)
        tensors.append((gguf_name(module) + ".weight", t))
    a = "llama."
    kv = [("general.architecture", GGUF_STR, "llama"),
          (a + "context_length", GGUF_U32, cfg["max_position_embeddings"]),
          (a + "embedding_length", GGUF_U32, cfg["hidden_size"]),
          (a + "block_count", GGUF_U32, cfg["num_hidden_layers"]),
          (a + "feed_forward_length", GGUF_U32, cfg["intermediate_size"]),
          (a + "attention.head_count", GGUF_U32, heads),
          (a + "attention.head_count_kv", GGUF_U32, kv_heads),
          (a + "rope.dimension_count", GGUF_U32, cfg["hidden_size"] // heads),
          (a + "attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"]),
          (a + "rope.freq_base", GGUF_F32, cfg["rope_theta"]),
          (a + "vocab_size", GGUF_U32, cfg["vocab_size"]),
          ("tokenizer.ggml.bos_token_id", GGUF_U32, cfg["bos_token_id"]),
          ("tokenizer.ggml.eos_token_id", GGUF_U32, cfg["eos_token_id"])]
    write_gguf(os.path.join(OUT, "base-F32.gguf"), kv, tensors)
    print("wrote base-F32.gguf", len(tensors), "tensors")


if __name__ == "__main__":
    sys.exit(main())
