#!/usr/bin/python3
"""Generates tiny random fixtures for the model families beyond Llama (Qwen3, Qwen2/3-MoE, Mixtral, Phi-3,
Cohere, Gemma 2, Gemma 3)
under tests/fixtures/models/, with expected logits from an independent float64 reference written
here from the published model definitions (Hugging Face transformers' modeling_qwen3, modeling_qwen2_moe,
modeling_gemma2, modeling_gemma3), not from Cypris.

Each folder: config.json, model.safetensors (fp32 random weights), expected.json with
{"input_ids": [...], "logits": [[...] per position], "greedy": [...]}: "greedy" is the reference's
own greedy continuation (8 tokens) of the first 12 input ids, decoded one token at a time by full
recomputation. Every feature of a family is switched on in its config (per-head q/k norms, sliding
windows on alternating layers with their own RoPE base, soft-capping, ...).
Run: /usr/bin/python3 tests/tools/gen_family_fixtures.py  (needs python3-torch)
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_llama_fixtures import compute_rope, rotate_half, write_safetensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "models")


def cos_sin(cfg, T, theta=None, scaling="cfg"):
    """[T, rot] cos/sin for positions 0..T-1 (float32 frequencies like transformers, then float64)."""
    c = dict(cfg)
    if theta is not None:
        c["rope_theta"] = theta
    if scaling != "cfg":
        c["rope_scaling"] = scaling
    inv, att = compute_rope(c)
    pos = torch.arange(T, dtype=torch.float32)
    freqs = torch.outer(pos, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * att).double(), (emb.sin() * att).double()


def rms(x, w, eps, offset=0.0):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * (offset + w)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def attention(q, k, v, nh, nkv, scale, window, softcap=None):
    """q [T, nh, D] etc. (after rope); causal, optional sliding window (keys j > i - window) and
    tanh soft-capping of the scores."""
    T = q.shape[0]
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    k = k.repeat_interleave(nh // nkv, dim=0)
    v = v.repeat_interleave(nh // nkv, dim=0)
    s = (q @ k.transpose(1, 2)) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i
    if window:
        allowed = allowed & (j > i - window)
    s = s.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, -1)


def rope_heads(x, cos, sin):
    """x [T, H, D]; neox rotary over the full head (cos/sin [T, D])."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


# ------------------------------------------- Qwen3, Qwen3-MoE, Mixtral (modeling_qwen3, _qwen3_moe, _mixtral)


def arch(cfg):
    return cfg["architectures"][0]


def has_qk_norm(cfg):
    return arch(cfg) in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")


def windows(cfg):
    n = cfg["num_hidden_layers"]
    if "layer_types" in cfg:
        return [cfg["sliding_window"] if t == "sliding_attention" else None for t in cfg["layer_types"]]
    if arch(cfg) == "MixtralForCausalLM":
        return [cfg.get("sliding_window")] * n
    use = cfg.get("use_sliding_window", False)
    mwl = cfg.get("max_window_layers", n)
    return [cfg["sliding_window"] if (use and i >= mwl) else None for i in range(n)]


def moe_layers(cfg):
    """Which layers are sparse (Qwen3MoeDecoderLayer / Qwen2MoeDecoderLayer: not in mlp_only_layers and
    on decoder_sparse_step)."""
    n = cfg["num_hidden_layers"]
    if arch(cfg) == "MixtralForCausalLM":
        return [True] * n
    if arch(cfg) not in ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"):
        return [False] * n
    step, dense = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers", [])
    return [i not in dense and (i + 1) % step == 0 for i in range(n)]


def moe_names(cfg):
    if arch(cfg) == "MixtralForCausalLM":
        return "block_sparse_moe.", "num_local_experts", ("w1", "w3", "w2")
    return "mlp.", "num_experts", ("gate_proj", "up_proj", "down_proj")


def sparse_moe(cfg, W, h, p):
    """Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock: softmax over the router logits, top-k,
    renormalised (always for Mixtral, when norm_topk_prob for Qwen3-MoE), weighted sum of the
    chosen experts' SiLU MLPs."""
    block, count_key, (wg, wu, wd) = moe_names(cfg)
    g = lambda n: W[n].double()
    E, k = cfg[count_key], cfg["num_experts_per_tok"]
    probs = torch.softmax(h @ g(p + block + "gate.weight").T, dim=-1)
    top_w, top_i = torch.topk(probs, k, dim=-1)
    if arch(cfg) == "MixtralForCausalLM" or cfg.get("norm_topk_prob", False):
        top_w = top_w / top_w.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        ex = f"{p}{block}experts.{e}."
        y = (torch.nn.functional.silu(h @ g(ex + wg + ".weight").T) * (h @ g(ex + wu + ".weight").T)) @ \
            g(ex + wd + ".weight").T
        weight = (top_w * (top_i == e)).sum(-1, keepdim=True)  # 0 for tokens not routed to e
        out = out + weight * y
    if cfg.get("shared_expert_intermediate_size"):
        # Qwen2MoeSparseMoeBlock: the shared expert, scaled by sigmoid(shared_expert_gate(h)).
        se = p + block + "shared_expert."
        y = (torch.nn.functional.silu(h @ g(se + "gate_proj.weight").T) * (h @ g(se + "up_proj.weight").T)) @ \
            g(se + "down_proj.weight").T
        out = out + torch.sigmoid(h @ g(p + block + "shared_expert_gate.weight").T) * y
    return out


def qkv_bias(cfg):
    """Qwen2 attention (also Qwen2-MoE's) always has q/k/v biases; the others when attention_bias."""
    return cfg.get("attention_bias", False) or arch(cfg) == "Qwen2MoeForCausalLM"


def qwen3_forward(cfg, W, ids):
    T = len(ids)
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    g = lambda n: W[n].double()
    b = lambda n: W[n].double() if n in W else 0.0
    x = g("model.embed_tokens.weight")[torch.tensor(ids)]
    cos, sin = cos_sin(cfg, T)
    for li, (window, moe) in enumerate(zip(windows(cfg), moe_layers(cfg))):
        p = f"model.layers.{li}."
        a = p + "self_attn."
        h = rms(x, g(p + "input_layernorm.weight"), eps)
        q = (h @ g(a + "q_proj.weight").T + b(a + "q_proj.bias")).view(T, nh, D)
        k = (h @ g(a + "k_proj.weight").T + b(a + "k_proj.bias")).view(T, nkv, D)
        v = (h @ g(a + "v_proj.weight").T + b(a + "v_proj.bias")).view(T, nkv, D)
        if has_qk_norm(cfg):
            q = rms(q, g(a + "q_norm.weight"), eps)  # per head, before rotary
            k = rms(k, g(a + "k_norm.weight"), eps)
        q, k = rope_heads(q, cos, sin), rope_heads(k, cos, sin)
        o = attention(q, k, v, nh, nkv, D ** -0.5, window)
        x = x + o @ g(a + "o_proj.weight").T + b(a + "o_proj.bias")
        h = rms(x, g(p + "post_attention_layernorm.weight"), eps)
        if moe:
            x = x + sparse_moe(cfg, W, h, p)
        else:
            m = p + "mlp."
            act = torch.nn.functional.silu(h @ g(m + "gate_proj.weight").T) * (h @ g(m + "up_proj.weight").T)
            x = x + act @ g(m + "down_proj.weight").T
    x = rms(x, g("model.norm.weight"), eps)
    head = g("model.embed_tokens.weight") if cfg.get("tie_word_embeddings") else g("lm_head.weight")
    return x @ head.T


def qwen3_weights(cfg, gen):
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or H // nh
    I, V = cfg["intermediate_size"], cfg["vocab_size"]
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=gen) * s
    W = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": 1 + r(H, s=0.1)}
    for i, moe in enumerate(moe_layers(cfg)):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        W[p + "input_layernorm.weight"] = 1 + r(H, s=0.1)
        W[p + "post_attention_layernorm.weight"] = 1 + r(H, s=0.1)
        for name, rows in (("q", nh * D), ("k", nkv * D), ("v", nkv * D)):
            W[a + f"{name}_proj.weight"] = r(rows, H, s=H ** -0.5)
            if qkv_bias(cfg):
                W[a + f"{name}_proj.bias"] = r(rows, s=0.1)
        W[a + "o_proj.weight"] = r(H, nh * D, s=(nh * D) ** -0.5)
        if cfg.get("attention_bias"):
            W[a + "o_proj.bias"] = r(H, s=0.1)
        if has_qk_norm(cfg):
            W[a + "q_norm.weight"] = 1 + r(D, s=0.3)
            W[a + "k_norm.weight"] = 1 + r(D, s=0.3)
        if moe:
            block, count_key, (wg, wu, wd) = moe_names(cfg)
            Ie = cfg.get("moe_intermediate_size", I)
            W[p + block + "gate.weight"] = r(cfg[count_key], H, s=1.0)
            for e in range(cfg[count_key]):
                ex = f"{p}{block}experts.{e}."
                W[ex + wg + ".weight"] = r(Ie, H, s=H ** -0.5)
                W[ex + wu + ".weight"] = r(Ie, H, s=H ** -0.5)
                W[ex + wd + ".weight"] = r(H, Ie, s=Ie ** -0.5)
            Is = cfg.get("shared_expert_intermediate_size")
            if Is:
                se = p + block + "shared_expert."
                W[se + "gate_proj.weight"] = r(Is, H, s=H ** -0.5)
                W[se + "up_proj.weight"] = r(Is, H, s=H ** -0.5)
                W[se + "down_proj.weight"] = r(H, Is, s=Is ** -0.5)
                W[p + block + "shared_expert_gate.weight"] = r(1, H, s=H ** -0.5)
        else:
            W[p + "mlp.gate_proj.weight"] = r(I, H, s=H ** -0.5)
            W[p + "mlp.up_proj.weight"] = r(I, H, s=H ** -0.5)
            W[p + "mlp.down_proj.weight"] = r(H, I, s=I ** -0.5)
    if not cfg.get("tie_word_embeddings"):
        W["lm_head.weight"] = r(V, H, s=H ** -0.5)
    return W


# ---------------------------------------------------------------- Phi-3 (modeling_phi3)


def longrope_cos_sin(cfg, T):
    """_compute_longrope_parameters, per position as vLLM's Phi3LongRoPEScaledRotaryEmbedding does:
    short factors below original_max_position_embeddings, long factors from it on."""
    rs = cfg["rope_scaling"]
    dim = int(cfg["hidden_size"] // cfg["num_attention_heads"] * cfg.get("partial_rotary_factor", 1.0))
    base = cfg["rope_theta"]
    orig = cfg["original_max_position_embeddings"]
    factor = cfg["max_position_embeddings"] / orig
    att = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 else 1.0
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    rows_c, rows_s = [], []
    for p in range(T):
        ext = torch.tensor(rs["long_factor"] if p >= orig else rs["short_factor"], dtype=torch.float32)
        inv = 1.0 / (ext * base ** shape)
        freqs = inv * torch.tensor(float(p), dtype=torch.float32)
        emb = torch.cat((freqs, freqs))
        rows_c.append(emb.cos() * att)
        rows_s.append(emb.sin() * att)
    return torch.stack(rows_c).double(), torch.stack(rows_s).double()


def phi3_forward(cfg, W, ids):
    """Phi3DecoderLayer: Llama's layer with fused qkv_proj ([q | k | v] rows) and gate_up_proj
    ([gate | up] rows), partial rotary on the first rotary_dim dims of each head."""
    T = len(ids)
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // nh
    eps = cfg["rms_norm_eps"]
    g = lambda n: W[n].double()
    x = g("model.embed_tokens.weight")[torch.tensor(ids)]
    cos, sin = longrope_cos_sin(cfg, T)
    rd = cos.shape[-1]
    for li in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{li}."
        a = p + "self_attn."
        h = rms(x, g(p + "input_layernorm.weight"), eps)
        qkv = h @ g(a + "qkv_proj.weight").T
        q = qkv[:, :nh * D].reshape(T, nh, D)
        k = qkv[:, nh * D:(nh + nkv) * D].reshape(T, nkv, D)
        v = qkv[:, (nh + nkv) * D:].reshape(T, nkv, D)
        q = torch.cat((rope_heads(q[..., :rd], cos, sin), q[..., rd:]), -1)
        k = torch.cat((rope_heads(k[..., :rd], cos, sin), k[..., rd:]), -1)
        o = attention(q, k, v, nh, nkv, D ** -0.5, cfg.get("sliding_window"))
        x = x + o @ g(a + "o_proj.weight").T
        h = rms(x, g(p + "post_attention_layernorm.weight"), eps)
        gate, up = (h @ g(p + "mlp.gate_up_proj.weight").T).chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ g(p + "mlp.down_proj.weight").T
    x = rms(x, g("model.norm.weight"), eps)
    return x @ g("lm_head.weight").T


def phi3_weights(cfg, gen):
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // nh
    I, V = cfg["intermediate_size"], cfg["vocab_size"]
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=gen) * s
    W = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": 1 + r(H, s=0.1), "lm_head.weight": r(V, H, s=H ** -0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = 1 + r(H, s=0.1)
        W[p + "post_attention_layernorm.weight"] = 1 + r(H, s=0.1)
        W[p + "self_attn.qkv_proj.weight"] = r((nh + 2 * nkv) * D, H, s=H ** -0.5)
        W[p + "self_attn.o_proj.weight"] = r(H, nh * D, s=(nh * D) ** -0.5)
        W[p + "mlp.gate_up_proj.weight"] = r(2 * I, H, s=H ** -0.5)
        W[p + "mlp.down_proj.weight"] = r(H, I, s=I ** -0.5)
    return W


# ---------------------------------------------------------------- Cohere / Cohere 2 (modeling_cohere, _cohere2)


def layer_norm_nobias(x, w, eps):
    """CohereLayerNorm: (x - mean) / sqrt(var + eps) * w, no bias."""
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * w


def rope_interleaved(x, cfg, T):
    """Cohere's rotary: pairs (2i, 2i+1) rotate with frequency i (freqs repeat_interleave'd)."""
    inv, _ = compute_rope(cfg)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    emb = torch.repeat_interleave(freqs, 2, dim=-1)
    cos, sin = emb.cos().double()[:, None, :], emb.sin().double()[:, None, :]
    x1, x2 = x[..., ::2], x[..., 1::2]
    rot = torch.stack([-x2, x1], dim=-1).flatten(-2)
    return x * cos + rot * sin


def cohere_sliding(cfg):
    n = cfg["num_hidden_layers"]
    if cfg["architectures"][0] != "Cohere2ForCausalLM":
        return [False] * n
    return [bool((i + 1) % cfg["sliding_window_pattern"]) for i in range(n)]


def cohere_forward(cfg, W, ids):
    """CohereDecoderLayer: h = LN(x); x = x + attn(h) + mlp(h). Cohere2: sliding layers use rotary
    and the window, the global ones neither. Logits times logit_scale, tied head."""
    T = len(ids)
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // nh
    eps = cfg["layer_norm_eps"]
    g = lambda n: W[n].double()
    x = g("model.embed_tokens.weight")[torch.tensor(ids)]
    cohere2 = cfg["architectures"][0] == "Cohere2ForCausalLM"
    for li, sliding in enumerate(cohere_sliding(cfg)):
        p = f"model.layers.{li}."
        a = p + "self_attn."
        h = layer_norm_nobias(x, g(p + "input_layernorm.weight"), eps)
        q = (h @ g(a + "q_proj.weight").T).view(T, nh, D)
        k = (h @ g(a + "k_proj.weight").T).view(T, nkv, D)
        v = (h @ g(a + "v_proj.weight").T).view(T, nkv, D)
        if cfg.get("use_qk_norm"):
            # Command R+: CohereLayerNorm over each head with its own weight row ([heads, D]), before rotary.
            q = layer_norm_nobias(q, g(a + "q_norm.weight"), eps)
            k = layer_norm_nobias(k, g(a + "k_norm.weight"), eps)
        if not cohere2 or sliding:
            q, k = rope_interleaved(q, cfg, T), rope_interleaved(k, cfg, T)
        o = attention(q, k, v, nh, nkv, D ** -0.5, cfg["sliding_window"] if sliding else None)
        attn = o @ g(a + "o_proj.weight").T
        m = p + "mlp."
        mlp = (torch.nn.functional.silu(h @ g(m + "gate_proj.weight").T) * (h @ g(m + "up_proj.weight").T)) @ \
            g(m + "down_proj.weight").T
        x = x + attn + mlp
    x = layer_norm_nobias(x, g("model.norm.weight"), eps)
    return (x @ g("model.embed_tokens.weight").T) * cfg["logit_scale"]


def cohere_weights(cfg, gen):
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // nh
    I, V = cfg["intermediate_size"], cfg["vocab_size"]
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=gen) * s
    W = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": 1 + r(H, s=0.1)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        W[p + "input_layernorm.weight"] = 1 + r(H, s=0.1)
        for name, rows in (("q", nh * D), ("k", nkv * D), ("v", nkv * D)):
            W[a + f"{name}_proj.weight"] = r(rows, H, s=H ** -0.5)
        W[a + "o_proj.weight"] = r(H, nh * D, s=(nh * D) ** -0.5)
        if cfg.get("use_qk_norm"):
            W[a + "q_norm.weight"] = 1 + r(nh, D, s=0.3)
            W[a + "k_norm.weight"] = 1 + r(nkv, D, s=0.3)
        W[p + "mlp.gate_proj.weight"] = r(I, H, s=H ** -0.5)
        W[p + "mlp.up_proj.weight"] = r(I, H, s=H ** -0.5)
        W[p + "mlp.down_proj.weight"] = r(H, I, s=I ** -0.5)
    return W


# ---------------------------------------------------------------- Gemma 2 / 3 (modeling_gemma2, modeling_gemma3)


def text_cfg(cfg):
    """Gemma3ForConditionalGeneration nests the text model's config under text_config."""
    return dict(cfg, **cfg["text_config"]) if "text_config" in cfg else cfg


def gemma_sliding(cfg):
    n = cfg["num_hidden_layers"]
    if "layer_types" in cfg:
        return [t == "sliding_attention" for t in cfg["layer_types"]]
    if cfg["model_type"] == "gemma2":
        return [i % 2 == 0 for i in range(n)]
    return [bool((i + 1) % cfg["sliding_window_pattern"]) for i in range(n)]


def gemma_forward(cfg, W, ids, prefix="model."):
    cfg = text_cfg(cfg)
    gemma3 = cfg["model_type"].startswith("gemma3")
    T = len(ids)
    H, nh, nkv, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    g = lambda n: W[n].double()
    norm = lambda x, n: rms(x, g(n), eps, offset=1.0)  # Gemma's (1 + w)
    x = g(prefix + "embed_tokens.weight")[torch.tensor(ids)] * (H ** 0.5)
    glob = cos_sin(cfg, T)
    local = cos_sin(cfg, T, theta=cfg.get("rope_local_base_freq"), scaling=None) if gemma3 else glob
    scale = cfg["query_pre_attn_scalar"] ** -0.5
    for li, sliding in enumerate(gemma_sliding(cfg)):
        p = f"{prefix}layers.{li}."
        a = p + "self_attn."
        h = norm(x, p + "input_layernorm.weight")
        q = (h @ g(a + "q_proj.weight").T).view(T, nh, D)
        k = (h @ g(a + "k_proj.weight").T).view(T, nkv, D)
        v = (h @ g(a + "v_proj.weight").T).view(T, nkv, D)
        if gemma3:
            q = norm(q, a + "q_norm.weight")
            k = norm(k, a + "k_norm.weight")
        cos, sin = local if sliding else glob
        q, k = rope_heads(q, cos, sin), rope_heads(k, cos, sin)
        o = attention(q, k, v, nh, nkv, scale, cfg["sliding_window"] if sliding else None,
                      cfg.get("attn_logit_softcapping"))
        h = norm(o @ g(a + "o_proj.weight").T, p + "post_attention_layernorm.weight")
        x = x + h
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        m = p + "mlp."
        act = gelu_tanh(h @ g(m + "gate_proj.weight").T) * (h @ g(m + "up_proj.weight").T)
        x = x + norm(act @ g(m + "down_proj.weight").T, p + "post_feedforward_layernorm.weight")
    x = norm(x, prefix + "norm.weight")
    logits = x @ g(prefix + "embed_tokens.weight").T  # tied
    cap = cfg.get("final_logit_softcapping")
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def gemma_weights(cfg, gen, prefix="model."):
    cfg = text_cfg(cfg)
    gemma3 = cfg["model_type"].startswith("gemma3")
    H, nh, nkv, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    I, V = cfg["intermediate_size"], cfg["vocab_size"]
    r = lambda *shape, s=1.0: torch.randn(*shape, generator=gen) * s
    # Embeddings are scaled by sqrt(H) on the way in: keep the table small so the logits stay O(10).
    W = {prefix + "embed_tokens.weight": r(V, H, s=0.3), prefix + "norm.weight": r(H, s=0.2)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"{prefix}layers.{i}."
        a = p + "self_attn."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            W[p + n + ".weight"] = r(H, s=0.2)
        for name, rows in (("q", nh * D), ("k", nkv * D), ("v", nkv * D)):
            W[a + f"{name}_proj.weight"] = r(rows, H, s=H ** -0.5)
        W[a + "o_proj.weight"] = r(H, nh * D, s=(nh * D) ** -0.5)
        if gemma3:
            W[a + "q_norm.weight"] = r(D, s=0.3)
            W[a + "k_norm.weight"] = r(D, s=0.3)
        W[p + "mlp.gate_proj.weight"] = r(I, H, s=H ** -0.5)
        W[p + "mlp.up_proj.weight"] = r(I, H, s=H ** -0.5)
        W[p + "mlp.down_proj.weight"] = r(H, I, s=I ** -0.5)
    return W


BASE = {
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}

QWEN3 = dict(BASE, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16, hidden_act="silu",
             attention_bias=True, tie_word_embeddings=False, rope_theta=1000000.0, sliding_window=5,
             use_sliding_window=True, max_window_layers=1)

QWEN3_MOE = dict(BASE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", head_dim=16, hidden_act="silu",
                 num_hidden_layers=3, intermediate_size=40, moe_intermediate_size=16, num_experts=8,
                 num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                 tie_word_embeddings=False, rope_theta=1000000.0)
QWEN2_MOE = dict(BASE, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", hidden_act="silu",
                 num_hidden_layers=3, intermediate_size=40, moe_intermediate_size=16,
                 shared_expert_intermediate_size=24, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False,
                 decoder_sparse_step=1, mlp_only_layers=[2], use_sliding_window=False, tie_word_embeddings=False,
                 rope_theta=1000000.0)
MIXTRAL = dict(BASE, architectures=["MixtralForCausalLM"], model_type="mixtral", intermediate_size=24,
               num_local_experts=8, num_experts_per_tok=2, sliding_window=6, tie_word_embeddings=False)

PHI3 = dict(BASE, architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_size=64, intermediate_size=48,
            hidden_act="silu", partial_rotary_factor=0.5, sliding_window=7, original_max_position_embeddings=8,
            rope_scaling={"type": "su", "short_factor": [1.0, 1.3, 2.1, 3.7], "long_factor": [1.5, 2.5, 6.0, 11.0]},
            tie_word_embeddings=False)

COHERE = dict(BASE, architectures=["CohereForCausalLM"], model_type="cohere", hidden_act="silu",
              layer_norm_eps=1e-5, logit_scale=0.5, rope_theta=8000.0, use_qk_norm=False)
COHERE_PLUS = dict(COHERE, use_qk_norm=True)
COHERE2 = dict(COHERE, architectures=["Cohere2ForCausalLM"], model_type="cohere2", num_hidden_layers=4,
               sliding_window=5, sliding_window_pattern=2)

GEMMA = dict(BASE, head_dim=16, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24,
             sliding_window=5, final_logit_softcapping=5.0, tie_word_embeddings=True)
GEMMA2 = dict(GEMMA, architectures=["Gemma2ForCausalLM"], model_type="gemma2", num_hidden_layers=3,
              attn_logit_softcapping=3.0)
GEMMA3 = dict(GEMMA, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", num_hidden_layers=4,
              sliding_window_pattern=3, rope_theta=100000.0, rope_local_base_freq=10000.0,
              rope_scaling={"rope_type": "linear", "factor": 2.0}, attn_logit_softcapping=4.0)
_GEMMA3_TEXT = {k: v for k, v in GEMMA3.items() if k not in ("architectures", "torch_dtype", "bos_token_id",
                                                             "eos_token_id")}
GEMMA3_MM = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "float32",
             "bos_token_id": 1, "eos_token_id": [2, 3],
             "text_config": dict(_GEMMA3_TEXT, attn_logit_softcapping=None, final_logit_softcapping=None),
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16}}
MM_PREFIX = "language_model.model."

FAMILIES = {
    # name: (config, forward, weights)
    "qwen3_qknorm_sliding": (QWEN3, qwen3_forward, qwen3_weights),
    "qwen3_moe_top2_of_8": (QWEN3_MOE, qwen3_forward, qwen3_weights),
    "mixtral_top2_of_8": (MIXTRAL, qwen3_forward, qwen3_weights),
    "qwen2_moe_shared_expert": (QWEN2_MOE, qwen3_forward, qwen3_weights),
    "phi3_fused_longrope": (PHI3, phi3_forward, phi3_weights),
    "cohere_parallel_block": (COHERE, cohere_forward, cohere_weights),
    "cohere2_sliding_nope": (COHERE2, cohere_forward, cohere_weights),
    "cohere_plus_qk_norm": (COHERE_PLUS, cohere_forward, cohere_weights),
    "gemma2_softcap_sliding": (GEMMA2, gemma_forward, gemma_weights),
    "gemma3_local_global": (GEMMA3, gemma_forward, gemma_weights),
    "gemma3_multimodal_text": (GEMMA3_MM, lambda c, W, ids: gemma_forward(c, W, ids, MM_PREFIX),
                               lambda c, gen: gemma_weights(c, gen, MM_PREFIX)),
}


def greedy(cfg, fwd, W, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(fwd(cfg, W, ids)[-1].argmax()))
    return ids[len(prompt):]


def main():
    only = set(sys.argv[1:])
    for name, (cfg, fwd, make) in sorted(FAMILIES.items()):
        if only and name not in only:
            continue
        gen = torch.Generator().manual_seed(sum(map(ord, name)))
        W = make(cfg, gen)
        ids = torch.randint(0, text_cfg(cfg)["vocab_size"], (20,), generator=gen).tolist()
        logits = fwd(cfg, W, ids)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_safetensors(os.path.join(d, "model.safetensors"), W, torch.float32)
        rows = [[float("%.7g" % v) for v in row] for row in logits.tolist()]
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump({"input_ids": ids, "logits": rows, "greedy": greedy(cfg, fwd, W, ids[:12], 8)}, f,
                      separators=(",", ":"))
        print(name, "max|logit|", float(logits.abs().max()))


if __name__ == "__main__":
    sys.exit(main())
