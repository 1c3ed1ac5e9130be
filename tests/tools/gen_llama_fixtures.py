#!/usr/bin/python3
"""Generates the tiny Llama/Mistral/Qwen2 fixtures under tests/fixtures/models/ and their expected
logits from an independent reference written here from the Hugging Face transformers formulas
(modeling_llama / modeling_mistral / modeling_qwen2 and modeling_rope_utils), in torch.

Each fixture folder holds config.json, model.safetensors (random weights) and expected.json:
{"input_ids": [...], "logits": [[...] per position]} for one full causal prefill. The forward runs
in float64 on the fp32 (or bf16/f16-rounded) weights; RoPE frequencies are computed in float32 as
transformers does. Run: /usr/bin/python3 tests/tools/gen_llama_fixtures.py  (needs python3-torch)
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import write_safetensors_entries  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "models")

# ---------------------------------------------------------------- RoPE (modeling_rope_utils)


def rope_dim(cfg):
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return int(head_dim * cfg.get("partial_rotary_factor", 1.0))


def default_inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def compute_rope(cfg, seq_len=None):
    """Returns (inv_freq float32, attention_factor) like transformers' _compute_*_parameters."""
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    base = cfg.get("rope_theta", 10000.0)
    dim = rope_dim(cfg)
    if kind == "default":
        return default_inv_freq(base, dim), 1.0
    if kind == "linear":
        return default_inv_freq(base, dim) / rs["factor"], 1.0
    if kind == "dynamic":
        max_pos = cfg["max_position_embeddings"]
        factor = rs["factor"]
        seq_len = seq_len if seq_len is not None and seq_len > max_pos else max_pos
        base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        return default_inv_freq(base, dim), 1.0
    if kind == "llama3":
        inv_freq = default_inv_freq(base, dim)
        factor = rs["factor"]
        low_freq_factor = rs["low_freq_factor"]
        high_freq_factor = rs["high_freq_factor"]
        old_context_len = rs["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama), 1.0
    if kind == "yarn":
        factor = rs["factor"]
        attention_factor = rs.get("attention_factor")
        mscale = rs.get("mscale")
        mscale_all_dim = rs.get("mscale_all_dim")
        # Current transformers: the given factor; original length for the correction range.
        original_max = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]

        def get_mscale(scale, m=1):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
            else:
                attention_factor = get_mscale(factor)
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def correction_dim(num_rot):
            return (dim * math.log(original_max / (num_rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extrap, interp = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        extrap_factor = 1 - ramp
        return interp * (1 - extrap_factor) + extrap * extrap_factor, attention_factor
    raise ValueError(kind)


def cos_sin(cfg, positions):
    """[T, dim] cos and sin (cat(freqs, freqs)) * attention_factor, float32 as in LlamaRotaryEmbedding.
    dynamic: position p uses seq_len = p + 1 (transformers' token-by-token decoding)."""
    rows_c, rows_s = [], []
    for p in positions:
        inv, att = compute_rope(cfg, p + 1)
        freqs = inv * torch.tensor(float(p), dtype=torch.float32)
        emb = torch.cat((freqs, freqs))
        rows_c.append(emb.cos() * att)
        rows_s.append(emb.sin() * att)
    return torch.stack(rows_c).double(), torch.stack(rows_s).double()


# ---------------------------------------------------------------- the decoder (modeling_llama)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def layer_windows(cfg):
    n = cfg["num_hidden_layers"]
    w = cfg.get("sliding_window")
    arch = cfg["architectures"][0]
    if arch == "MistralForCausalLM":
        return [w] * n
    if arch == "Qwen2ForCausalLM":
        use = cfg.get("use_sliding_window", False)
        mwl = cfg.get("max_window_layers", n)
        return [w if (use and w and i >= mwl) else None for i in range(n)]
    return [None] * n


def forward(cfg, W, ids, rec=None):
    """Full causal prefill of ids; returns logits [T, vocab] (float64). rec, a dict, receives the
    intermediates under the names models/llama.cpp gives them ([T, width] each)."""
    rec = {} if rec is None else rec
    T = len(ids)
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or H // nh
    rd = rope_dim(cfg)
    eps = cfg["rms_norm_eps"]
    g = lambda name: W[name].double()
    gb = lambda name: W[name].double() if name in W else 0.0
    x = g("model.embed_tokens.weight")[torch.tensor(ids)]
    rec["embed"] = x
    flat = lambda t: t.transpose(0, 1).reshape(T, -1)  # [heads, T, D] -> [T, heads * D]
    cos, sin = cos_sin(cfg, list(range(T)))
    i_idx = torch.arange(T)[:, None]
    j_idx = torch.arange(T)[None, :]
    for li, window in enumerate(layer_windows(cfg)):
        p = f"model.layers.{li}."
        p2 = f"layers.{li}."
        h = rms_norm(x, g(p + "input_layernorm.weight"), eps)
        rec[p2 + "input_norm"] = h
        q = h @ g(p + "self_attn.q_proj.weight").T + gb(p + "self_attn.q_proj.bias")
        k = h @ g(p + "self_attn.k_proj.weight").T + gb(p + "self_attn.k_proj.bias")
        v = h @ g(p + "self_attn.v_proj.weight").T + gb(p + "self_attn.v_proj.bias")
        rec[p2 + "q"], rec[p2 + "k"], rec[p2 + "v"] = q, k, v
        q = q.view(T, nh, D).transpose(0, 1)
        k = k.view(T, nkv, D).transpose(0, 1)
        v = v.view(T, nkv, D).transpose(0, 1)
        qr, qp = q[..., :rd], q[..., rd:]
        kr, kp = k[..., :rd], k[..., rd:]
        qr = qr * cos + rotate_half(qr) * sin
        kr = kr * cos + rotate_half(kr) * sin
        q, k = torch.cat((qr, qp), -1), torch.cat((kr, kp), -1)
        rec[p2 + "q_rot"], rec[p2 + "k_rot"] = flat(q), flat(k)
        k = k.repeat_interleave(nh // nkv, dim=0)  # repeat_kv
        v = v.repeat_interleave(nh // nkv, dim=0)
        scores = (q @ k.transpose(1, 2)) * D ** -0.5
        allowed = j_idx <= i_idx
        if window:
            allowed = allowed & (j_idx > i_idx - window)  # sliding_window keys incl. the query's own
        scores = scores.masked_fill(~allowed, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        attn = attn.transpose(0, 1).reshape(T, nh * D)
        rec[p2 + "attn"] = attn
        o = attn @ g(p + "self_attn.o_proj.weight").T + gb(p + "self_attn.o_proj.bias")
        rec[p2 + "o_proj"] = o
        x = x + o
        rec[p2 + "residual_mid"] = x
        h = rms_norm(x, g(p + "post_attention_layernorm.weight"), eps)
        rec[p2 + "post_norm"] = h
        gate = h @ g(p + "mlp.gate_proj.weight").T + gb(p + "mlp.gate_proj.bias")
        up = h @ g(p + "mlp.up_proj.weight").T + gb(p + "mlp.up_proj.bias")
        act = torch.nn.functional.silu(gate) * up
        rec[p2 + "mlp_act"] = act
        down = act @ g(p + "mlp.down_proj.weight").T + gb(p + "mlp.down_proj.bias")
        rec[p2 + "mlp_out"] = down
        x = x + down
    x = rms_norm(x, g("model.norm.weight"), eps)
    rec["final_norm"] = x
    head = g("model.embed_tokens.weight") if cfg.get("tie_word_embeddings") else g("lm_head.weight")
    rec["logits"] = x @ head.T
    return rec["logits"]


# ---------------------------------------------------------------- weights and files


def make_weights(cfg, gen):
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or H // nh
    I, V = cfg["intermediate_size"], cfg["vocab_size"]
    arch = cfg["architectures"][0]
    qkv_bias = arch == "Qwen2ForCausalLM" or cfg.get("attention_bias", False)
    o_bias = arch != "Qwen2ForCausalLM" and cfg.get("attention_bias", False)
    mlp_bias = cfg.get("mlp_bias", False)
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=gen) * s
    W = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": 1 + r(H, s=0.1)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = 1 + r(H, s=0.1)
        W[p + "post_attention_layernorm.weight"] = 1 + r(H, s=0.1)
        for name, rows in (("q", nh * D), ("k", nkv * D), ("v", nkv * D)):
            W[p + f"self_attn.{name}_proj.weight"] = r(rows, H, s=H ** -0.5)
            if qkv_bias:
                W[p + f"self_attn.{name}_proj.bias"] = r(rows, s=0.1)
        W[p + "self_attn.o_proj.weight"] = r(H, nh * D, s=(nh * D) ** -0.5)
        if o_bias:
            W[p + "self_attn.o_proj.bias"] = r(H, s=0.1)
        W[p + "mlp.gate_proj.weight"] = r(I, H, s=H ** -0.5)
        W[p + "mlp.up_proj.weight"] = r(I, H, s=H ** -0.5)
        W[p + "mlp.down_proj.weight"] = r(H, I, s=I ** -0.5)
        if mlp_bias:
            W[p + "mlp.gate_proj.bias"] = r(I, s=0.1)
            W[p + "mlp.up_proj.bias"] = r(I, s=0.1)
            W[p + "mlp.down_proj.bias"] = r(H, s=0.1)
    if not cfg.get("tie_word_embeddings"):
        W["lm_head.weight"] = r(V, H, s=H ** -0.5)
    return W


def write_safetensors(path, tensors, dtype):
    """8-byte little-endian header length, JSON header, raw little-endian data."""
    tag = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}[dtype]
    entries = {}
    for n in tensors:
        t = tensors[n].to(dtype).contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if dtype != torch.float32 else t.numpy().tobytes()
        entries[n] = (tag, list(t.shape), raw)
    write_safetensors_entries(path, entries)


BASE = {
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}


def llama(**kw):
    c = dict(BASE, architectures=["LlamaForCausalLM"], model_type="llama")
    c.update(kw)
    return c


CASES = {
    # name: (config, sequence length, weight dtype)
    "llama_gqa_tied": (llama(tie_word_embeddings=True), 20, torch.float32),
    "llama_gqa_tied_bf16": (llama(tie_word_embeddings=True, torch_dtype="bfloat16"), 20, torch.bfloat16),
    "llama_gqa_tied_f16": (llama(tie_word_embeddings=True, torch_dtype="float16"), 20, torch.float16),
    "llama_untied_llama3_bias": (llama(tie_word_embeddings=False, attention_bias=True, mlp_bias=True,
                                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 64}), 20, torch.float32),
    "llama_linear": (llama(tie_word_embeddings=False, rope_scaling={"type": "linear", "factor": 2.0}), 20,
                     torch.float32),
    "llama_dynamic": (llama(tie_word_embeddings=True, max_position_embeddings=12,
                            rope_scaling={"type": "dynamic", "factor": 2.0}), 20, torch.float32),
    "llama_yarn": (llama(tie_word_embeddings=False, max_position_embeddings=64, rope_theta=500.0,
                         rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16,
                                       "mscale": 1.0, "mscale_all_dim": 0.5}),
                   20, torch.float32),
    "mistral_sliding_window": (dict(BASE, architectures=["MistralForCausalLM"], model_type="mistral",
                                    num_key_value_heads=1, sliding_window=5, tie_word_embeddings=False), 20,
                               torch.float32),
    "qwen2_bias_sliding": (dict(BASE, architectures=["Qwen2ForCausalLM"], model_type="qwen2", sliding_window=4,
                                use_sliding_window=True, max_window_layers=1, tie_word_embeddings=True,
                                rope_theta=1000000.0), 20, torch.float32),
}


def main():
    torch.manual_seed(0)
    for idx, (name, (cfg, T, dtype)) in enumerate(sorted(CASES.items())):
        # The bf16/f16 variants share the fp32 fixture's weights so tests can compare the two.
        base_name = name.replace("_bf16", "").replace("_f16", "")
        gen = torch.Generator().manual_seed(sum(map(ord, base_name)))
        W = make_weights(cfg, gen)
        ids = torch.randint(0, cfg["vocab_size"], (T,), generator=gen).tolist()
        rounded = {k: v.to(dtype).float() for k, v in W.items()}
        logits = forward(cfg, rounded, ids)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_safetensors(os.path.join(d, "model.safetensors"), W, dtype)
        with open(os.path.join(d, "expected.json"), "w") as f:
            rows = [[float("%.7g" % v) for v in row] for row in logits.tolist()]
            json.dump({"input_ids": ids, "logits": rows}, f, separators=(",", ":"))
        print(name, "T", T, "max|logit|", float(logits.abs().max()))


if __name__ == "__main__":
    sys.exit(main())
