#!/usr/bin/python3
"""Writes tiny GPTQ and AWQ checkpoints (Llama layout) under tests/fixtures/quant/, packed exactly as
the reference quantizers pack them, with an independent float64 reference computed here, not by Cypris.

Packing (read from the reference implementations, written anew here):
- GPTQ, AutoGPTQ's QuantLinear.pack: intweight = round(W / scale) + zero per group, transposed to
  [in, out]; qweight [in * bits / 32, out] int32, input row k at bits * (k % (32 / bits)) of word row
  k // (32 / bits); qzeros [groups, out * bits / 32] the same along the outputs, storing zero - 1 in
  v1 checkpoints (checkpoint_format "gptq") and zero itself in "gptq_v2"; scales [groups, out] fp16;
  3 bits: 32 values in 3 words (pack3_rows, AutoGPTQ's loop), along the inputs and the outputs;
  g_idx [in] int32, the group of each input column (with act-order a permutation of i // group).
- AWQ, AutoAWQ's WQLinear_GEMM.from_linear: intweight [in, out]; qweight [in, out / 8] int32 where
  nibble i of word (k, c) holds column c * 8 + ORDER[i], ORDER = [0, 2, 4, 6, 1, 3, 5, 7]; qzeros
  [groups, out / 8] the same; scales [groups, out] fp16. No zero - 1.
- compressed-tensors pack-quantized (pack_to_int32 of llm-compressor's PackedQuantizationCompressor):
  the signed value q_s is stored as q_s + 2^(bits - 1); weight_packed [out, in * bits / 32] int32
  with input k of row n at bits * (k % (32 / bits)) of word (n, k // (32 / bits)); weight_scale
  [out, groups] in the model's dtype (bf16 here); weight_zero_point (asymmetric) packed the same way
  along the outputs, [out * bits / 32, groups]; weight_shape [2] int64.
Dequantized weight: scale * (q - zero), exact in fp32 (fp16 or bf16 scale, small integer).
- FP8 (vLLM's Fp8Config checkpoints and compressed-tensors float-quantized): weight [out, in]
  F8_E4M3, q = e4m3(W / scale) rounded to nearest even (|W / scale| <= 448 by construction), scale
  = max|W| / 448 over the tensor (weight_scale, fp32 scalar), the output channel (weight_scale
  [out, 1], bf16 in compressed-tensors' FP8_DYNAMIC) or a block of 128 x 128 (weight_scale_inv
  [ceil(out / 128), ceil(in / 128)] fp32, as DeepSeek-V3's fp8 checkpoints); a static activation
  scheme adds input_scale. Dequantized: float32(e4m3 value) * scale, one fp32 product.

Each folder: config.json (quantization_config inside, or quantize_config.json beside it),
model.safetensors, expected.json {"input_ids", "logits" (fp64 forward over the dequantized weights,
embeddings and norms as stored in fp16), "greedy" (8 tokens after the first 12 ids, full
recomputation), "dequant_fnv1a64" {layer: FNV-1a 64-bit hash (hex) of the [out, in] fp32 little-endian dequantized
weight}}.
online_f16: a 16-bit checkpoint with, per online method (-q fp8, --load-in-8bit, --load-in-4bit), the
reference quantization's dequantized hashes, logits and greedy continuation (expected.json "online").
Run: /usr/bin/python3 tests/tools/gen_quant_fixtures.py [NAME ...]  (needs python3-numpy)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import write_safetensors_entries  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "quant")
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

BASE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
}
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]


def quantize(W, bits, group, sym, rng, act_order, bf16_scales=False):
    """Per group (along the input columns) min/max quantization as GPTQ's and AWQ's quantizers set up
    their scales (the rounding search of GPTQ itself does not matter for the format). Returns q
    [out, in], zeros [groups, out], scales fp16 [groups, out], g_idx [in]."""
    out, inp = W.shape
    maxq = 2 ** bits - 1
    g = inp if group == -1 else group
    groups = inp // g
    g_idx = np.arange(inp) // g
    if act_order:
        perm = rng.permutation(inp)  # the act-order column order; groups are runs of it
        g_idx = np.empty(inp, dtype=np.int64)
        g_idx[perm] = np.arange(inp) // g
    q = np.zeros((out, inp), dtype=np.int64)
    zeros = np.zeros((groups, out), dtype=np.int64)
    scales = np.zeros((groups, out), dtype=np.float16)
    for gi in range(groups):
        cols = np.nonzero(g_idx == gi)[0]
        Wg = W[:, cols]
        lo, hi = np.minimum(Wg.min(1), 0), np.maximum(Wg.max(1), 0)
        if sym:
            amax = np.maximum(-lo, hi)
            s = (2 * amax / maxq).astype(np.float16)
            z = np.full(out, (maxq + 1) // 2)
        else:
            s = ((hi - lo) / maxq).astype(np.float16)
            z = np.clip(np.round(-lo / s.astype(np.float64)), 1, maxq).astype(np.int64)  # >= 1: see v1 below
        s = np.where(s == 0, np.float16(1e-3), s)
        if bf16_scales:  # scales in the model's bf16, also exact in fp16 (normal range, 8 bits)
            s = to_bf16_exact(s.astype(np.float32)).astype(np.float16)
        scales[gi], zeros[gi] = s, z
        q[:, cols] = np.clip(np.round(Wg / s[:, None].astype(np.float64)) + z[:, None], 0, maxq)
    return q, zeros, scales, g_idx


def dequantize(q, zeros, scales, g_idx):
    return scales[g_idx].T.astype(np.float64) * (q - zeros[g_idx].T)


def pack3_rows(iw):
    """AutoGPTQ's 3-bit QuantLinear.pack along the rows of iw [K, M] (K a multiple of 32): per 32 rows
    three words, the first holding values 0-9 at 3j and the low 2 bits of value 10 at bit 30, the
    second value 10's top bit, values 11-20 at 3j + 1 and value 21's low bit at 31, the third value
    21's top 2 bits and values 22-31 at 3j + 2."""
    K, M = iw.shape
    out = np.zeros((K // 32 * 3, M), dtype=np.uint64)
    word = lambda v: v & np.uint64(0xFFFFFFFF)  # the uint32 words AutoGPTQ shifts into
    i = row = 0
    while row < out.shape[0]:
        for j in range(10):
            out[row] |= iw[i + j] << np.uint64(3 * j)
        i += 10
        out[row] |= word(iw[i] << np.uint64(30))
        row += 1
        out[row] |= (iw[i] >> np.uint64(2)) & np.uint64(1)
        i += 1
        for j in range(10):
            out[row] |= iw[i + j] << np.uint64(3 * j + 1)
        i += 10
        out[row] |= word(iw[i] << np.uint64(31))
        row += 1
        out[row] |= (iw[i] >> np.uint64(1)) & np.uint64(3)
        i += 1
        for j in range(10):
            out[row] |= iw[i + j] << np.uint64(3 * j + 2)
        i += 10
        row += 1
    return out


def pack_gptq(q, zeros, bits, v1):
    per = 32 // bits
    out, inp = q.shape
    iw = q.T.astype(np.uint64)  # [in, out]
    if bits == 3:  # 32 values in 3 words, along the inputs in qweight and the outputs in qzeros
        z = (zeros - (1 if v1 else 0)).astype(np.uint64)
        qweight, qzeros = pack3_rows(iw), pack3_rows(z.T).T
        return qweight.astype(np.uint32).view(np.int32), np.ascontiguousarray(qzeros.astype(np.uint32)).view(np.int32)
    qweight = np.zeros((inp // per, out), dtype=np.uint64)
    for j in range(per):
        qweight |= iw[j::per] << np.uint64(bits * j)
    # v1 stores zero - 1; the generator keeps zeros >= 1 so that no -1 spills into the neighbours
    # (AutoGPTQ's uint32 cast of -1 would), which is the checkpoints' normal case.
    z = (zeros - (1 if v1 else 0)).astype(np.uint64)
    assert (z <= 2 ** bits - 1).all()
    qzeros = np.zeros((zeros.shape[0], out // per), dtype=np.uint64)
    for j in range(per):
        qzeros |= z[:, j::per] << np.uint64(bits * j)
    return qweight.astype(np.uint32).view(np.int32), qzeros.astype(np.uint32).view(np.int32)


def marlin_perms():
    """Marlin's _get_perms (IST-DASLab marlin; AutoGPTQ's and vLLM's Marlin layers use the same): the
    1024-entry weight permutation of a row of 16 x 16 tiles (the mma.m16n8k16 fragment order, each 8
    of it interleaved [0, 2, 4, 6, 1, 3, 5, 7]), and the scale permutations for grouped (64 entries)
    and single-group (32 entries) layers."""
    perm = []
    for i in range(32):
        perm1 = []
        col = i // 4
        for block in (0, 1):
            for row in (2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1):
                perm1.append(16 * row + col + 8 * block)
        for j in range(4):
            perm.extend(p + 256 * j for p in perm1)
    perm = np.array(perm).reshape(-1, 8)[:, [0, 2, 4, 6, 1, 3, 5, 7]].ravel()
    scale_perm = [i + 8 * j for i in range(8) for j in range(8)]
    scale_perm_single = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    return perm, np.array(scale_perm), np.array(scale_perm_single)


def pack_marlin(q, scales, group):
    """Marlin's Layer.pack step by step (AutoGPTQ's MarlinQuantLinear.pack is the same code): from the
    fake-quantized fp16 weight W16 = fp16(s * (q - 8)) [out, in] and the fp16 scales [groups, out],
    B [in / 16, out * 2] int32 and s [groups, out] fp16, both permuted. The rounding w / s recovers
    q - 8 exactly (asserted), so B holds the symmetric GPTQ layer's q."""
    perm, sperm, sperm1 = marlin_perms()
    n, k = q.shape
    groupsize = k if group == -1 else group
    tile, maxq = 16, 15
    g_idx = np.arange(k) // groupsize
    W16 = (scales[g_idx].T.astype(np.float64) * (q - 8)).astype(np.float16)
    s = scales.astype(np.float32)  # Marlin: s = scales.t(), [groups, n]
    w = W16.T.astype(np.float32)   # [k, n]
    if groupsize != k:
        w = w.reshape(-1, groupsize, n).transpose(1, 0, 2).reshape(groupsize, -1)
        s = s.reshape(1, -1)
    w = np.round((w / s).astype(np.float16).astype(np.float32)).astype(np.int64)  # fp16 division, round half even
    w += (maxq + 1) // 2
    w = np.clip(w, 0, maxq)
    if groupsize != k:
        w = w.reshape(groupsize, -1, n).transpose(1, 0, 2).reshape(k, n)
        s = s.reshape(-1, len(sperm))[:, sperm]
    else:
        s = s.reshape(-1, len(sperm1))[:, sperm1]
    s = s.reshape(-1, n)
    assert (w == q.T).all()
    w = w.reshape(k // tile, tile, n // tile, tile).transpose(0, 2, 1, 3).reshape(k // tile, n * tile)
    res = w.reshape(-1, perm.size)[:, perm].reshape(w.shape).astype(np.uint32)
    B = np.zeros((res.shape[0], res.shape[1] // 8), dtype=np.uint32)
    for i in range(8):
        B |= res[:, i::8] << np.uint32(4 * i)
    return B.view(np.int32), s.astype(np.float16)


def pack_awq(q, zeros):
    iw = q.T.astype(np.uint64)  # [in, out]
    inp, out = iw.shape
    qweight = np.zeros((inp, out // 8), dtype=np.uint64)
    qzeros = np.zeros((zeros.shape[0], out // 8), dtype=np.uint64)
    for i in range(8):
        qweight |= iw[:, AWQ_ORDER[i]::8] << np.uint64(4 * i)
        qzeros |= zeros[:, AWQ_ORDER[i]::8].astype(np.uint64) << np.uint64(4 * i)
    return qweight.astype(np.uint32).view(np.int32), qzeros.astype(np.uint32).view(np.int32)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def pack_ct(q, zeros, bits, sym):
    per = 32 // bits
    u = q.astype(np.uint64)  # q_s + 2^(bits-1) is the unsigned q here (zero likewise)
    packed = np.zeros((q.shape[0], q.shape[1] // per), dtype=np.uint64)
    for i in range(per):
        packed |= u[:, i::per] << np.uint64(bits * i)
    zp = None
    if not sym:
        zt = zeros.T.astype(np.uint64)  # [out, groups]
        zp = np.zeros((zt.shape[0] // per, zt.shape[1]), dtype=np.uint64)
        for i in range(per):
            zp |= zt[i::per, :] << np.uint64(bits * i)
        zp = zp.astype(np.uint32).view(np.int32)
    return packed.astype(np.uint32).view(np.int32), zp


class BF16:
    """bf16 values kept as their uint16 bits (numpy has no bfloat16)."""

    def __init__(self, values):
        f = np.asarray(values, dtype=np.float32)
        self.bits = (f.view(np.uint32) >> 16).astype(np.uint16)
        assert ((self.bits.astype(np.uint32) << 16).view(np.float32) == f).all(), "not exact in bf16"
        self.shape = f.shape


def to_bf16_exact(a):
    """Rounds down to bf16 (truncation) so the value is exactly representable."""
    f = np.asarray(a, dtype=np.float32)
    return (f.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


class I8:
    """int8 values, written with the safetensors dtype I8."""

    def __init__(self, values):
        self.bits, self.shape = np.asarray(values, dtype=np.int8).view(np.uint8), np.shape(values)


class F8:
    """e4m3 codes, written with the safetensors dtype F8_E4M3."""

    def __init__(self, codes):
        self.bits, self.shape = np.asarray(codes, dtype=np.uint8), codes.shape


def write_safetensors(path, tensors):
    tags = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.int32): "I32",
            np.dtype(np.int64): "I64", np.dtype(np.uint8): "U8", np.dtype(np.int16): "I16"}
    entries = {}
    for n in sorted(tensors):
        if isinstance(tensors[n], BF16):
            raw, tag, shape = tensors[n].bits.astype("<u2").tobytes(), "BF16", list(tensors[n].shape)
        elif isinstance(tensors[n], F8):
            raw, tag, shape = tensors[n].bits.tobytes(), "F8_E4M3", list(tensors[n].shape)
        elif isinstance(tensors[n], I8):
            raw, tag, shape = tensors[n].bits.tobytes(), "I8", list(tensors[n].shape)
        else:
            t = np.ascontiguousarray(tensors[n])
            raw, tag, shape = t.astype(t.dtype.newbyteorder("<")).tobytes(), tags[t.dtype], list(t.shape)
        entries[n] = (tag, shape, raw)
    write_safetensors_entries(path, entries)


# ---------------------------------------------------------------- FP8 e4m3


def e4m3_value(c):
    e, m = (c >> 3) & 15, c & 7
    v = m * 2.0 ** -9 if e == 0 else 2.0 ** (e - 7) * (1 + m / 8)
    return -v if c & 0x80 else v


E4M3_POS = np.array([e4m3_value(c) for c in range(127)])  # codes 0..126: the finite non-negatives, increasing


def e4m3_encode(x):
    """Round to nearest e4m3, ties to the even code (the even mantissa), saturating at 448."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(E4M3_POS, a), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    d_hi, d_lo = E4M3_POS[hi] - a, a - E4M3_POS[lo]
    code = np.where((d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0)), lo, hi)
    code = np.where(E4M3_POS[code] == 0, 0, code)  # zero stays +0
    return (code | np.where(np.signbit(x) & (code != 0), 0x80, 0)).astype(np.uint8)


def e4m3_decode(codes):
    table = np.array([e4m3_value(c) if (c & 0x7f) != 0x7f else np.nan for c in range(256)])
    return table[codes]


def quantize_fp8(W, strategy, bf16_scales):
    """Returns codes [out, in] uint8, the scale tensor as stored and the fp32 dequantized weight."""
    out, inp = W.shape
    if strategy == "tensor":
        s = np.array(np.abs(W).max() / 448.0)
        full = np.full((out, inp), s)
    elif strategy == "channel":
        s = (np.abs(W).max(1) / 448.0)[:, None]
        full = np.repeat(s, inp, 1)
    else:  # 128 x 128 blocks
        br, bc = -(-out // 128), -(-inp // 128)
        s = np.zeros((br, bc))
        for i in range(br):
            for j in range(bc):
                s[i, j] = np.abs(W[128 * i:128 * (i + 1), 128 * j:128 * (j + 1)]).max() / 448.0
        full = np.repeat(np.repeat(s, 128, 0), 128, 1)[:out, :inp]
    s32 = to_bf16_exact(s) if bf16_scales else s.astype(np.float32)
    full32 = (to_bf16_exact(full) if bf16_scales else full.astype(np.float32)).astype(np.float32)
    codes = e4m3_encode(W / full32.astype(np.float64))
    deq = e4m3_decode(codes).astype(np.float32) * full32  # one fp32 product, as the kernels
    return codes, np.asarray(s32, dtype=np.float32), deq.astype(np.float64)


# ---------------------------------------------------------------- float64 Llama forward


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, theta):
    T, H, D = x.shape
    inv = 1.0 / theta ** (np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1))[:, None], np.sin(np.concatenate([ang, ang], -1))[:, None]
    rot = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rot * sin


def forward(cfg, W, ids):
    T, H = len(ids), cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // nh
    eps = cfg["rms_norm_eps"]
    x = W["model.embed_tokens.weight"][ids]
    for li in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{li}."
        h = rms(x, W[p + "input_layernorm.weight"], eps)
        q = rope((h @ W[p + "self_attn.q_proj"].T).reshape(T, nh, D), cfg["rope_theta"])
        k = rope((h @ W[p + "self_attn.k_proj"].T).reshape(T, nkv, D), cfg["rope_theta"])
        v = (h @ W[p + "self_attn.v_proj"].T).reshape(T, nkv, D)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(D)
        s = np.where(np.tril(np.ones((T, T), dtype=bool))[None], s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, H)
        x = x + o @ W[p + "self_attn.o_proj"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ W[p + "mlp.gate_proj"].T, h @ W[p + "mlp.up_proj"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj"].T
    return rms(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T


def greedy(cfg, W, prompt, n):
    """The greedy continuation and its smallest top-1/top-2 gap relative to the row's largest |logit|."""
    ids, gap = list(prompt), float("inf")
    for _ in range(n):
        row = forward(cfg, W, ids)[-1]
        top = np.sort(row)[-2:]
        gap = min(gap, (top[1] - top[0]) / np.abs(row).max())
        ids.append(int(row.argmax()))
    return ids[len(prompt):], gap


# The greedy test must not hinge on a near tie: Cypris's 8-bit activations move the logits by up to
# about 2% of the largest (see the model test's tolerance), so each fixture's continuation keeps its
# top token ahead by at least this much; the seed is advanced until it does.
MIN_GREEDY_GAP = 0.05


# ---------------------------------------------------------------- fixtures

FIXTURES = {
    # name: (method, bits, group, sym, v1, act_order, layers, quantize_config.json instead of config.json)
    "gptq_w4_g128_v1": ("gptq", 4, 128, False, True, False, 1, False),
    "gptq_w8_g32_sym_v2": ("gptq", 8, 32, True, False, False, 1, True),
    "gptq_w2_rowgroup_v1": ("gptq", 2, -1, False, True, False, 1, False),
    "gptq_w3_g32_v1": ("gptq", 3, 32, False, True, False, 1, False),
    "gptq_w4_g64_act_order": ("gptq", 4, 64, False, True, True, 1, False),
    "awq_w4_g128": ("awq", 4, 128, False, False, False, 1, False),
    "awq_w4_g64": ("awq", 4, 64, False, False, False, 1, False),
    # groups of 64 in order: kept as W4G64 blocks (one scale per group)
    "gptq_w4_g64_v1": ("gptq", 4, 64, False, True, False, 1, False),
    "ct_w4a16_g64_asym": ("ct", 4, 64, False, False, False, 1, False),
    # symmetric g128 with an MLP of 256 (down_proj: two groups), and its twin packed by Marlin's
    # Layer.pack from the same weights (checkpoint_format marlin: B and s tensors)
    "gptq_w4_g128_sym_v1": ("gptq", 4, 128, True, True, False, 1, False,
                            {"intermediate_size": 256, "marlin_twin": "gptq_marlin_w4_g128"}),
    "ct_w4a16_g128_sym": ("ct", 4, 128, True, False, False, 1, False),
    "ct_w8a16_channel_asym": ("ct", 8, -1, False, False, False, 1, False),
}


# name: (config format, weight scale strategy, activation scheme, bf16 scales)
FP8_FIXTURES = {
    "fp8_tensor_static": ("fp8", "tensor", "static", False),
    "fp8_block128_dynamic": ("fp8", "block", "dynamic", False),
    "ct_fp8_channel_dynamic": ("ct", "channel", "dynamic", True),
    "ct_fp8_tensor_static": ("ct", "tensor", "static", False),
    # compressed-tensors int-quantized W8A8: I8 weights, q = clip(round(W / s) + zp, -128, 127)
    "ct_w8a8_channel_dynamic": ("ct_int8", "channel", "dynamic", True),
    "ct_w8a8_tensor_static_asym": ("ct_int8", "tensor", "static", False),
}


def quantize_int8(W, strategy, bf16_scales, sym):
    """compressed-tensors' int8 weights: per channel or tensor, symmetric (zero 0) or min/max
    asymmetric. Scales kept exact in fp16 (Cypris's W8 blocks hold fp16). Returns q, scale, zero
    (as stored, or None), the dequantized weight scale * (q - zero) in fp32."""
    out, inp = W.shape
    axis = 1 if strategy == "channel" else None
    if sym:
        s = np.abs(W).max(axis=axis, keepdims=True) / 127.0
        zp = np.zeros_like(s)
    else:
        lo, hi = np.minimum(W.min(axis=axis, keepdims=True), 0), np.maximum(W.max(axis=axis, keepdims=True), 0)
        s = (hi - lo) / 255.0
    s = to_bf16_exact(s) if bf16_scales else s.astype(np.float16).astype(np.float32)
    s64 = s.astype(np.float64)
    if not sym:
        zp = np.clip(np.round(-128 - lo / s64), -128, 127)
    q = np.clip(np.round(W / s64) + zp, -128, 127)
    deq = (s64 * (q - zp)).astype(np.float32).astype(np.float64)
    assert (s64 * (q - zp) == deq).all()
    shape = (out, 1) if strategy == "channel" else (1,)
    return q.astype(np.int8), s.reshape(shape).astype(np.float32), None if sym else zp.reshape(shape).astype(np.int8), deq


def make(name, spec):
    for attempt in range(100):
        if (make_fp8_seed if name in FP8_FIXTURES else make_seed)(name, spec, sum(map(ord, name)) + 1000 * attempt):
            return
    raise SystemExit(f"{name}: no seed gave a greedy continuation without near ties")


def write_fixture(name, cfg, T, R, hashes, ids, separate_qc=None, extra=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    if separate_qc is not None:
        with open(os.path.join(d, "quantize_config.json"), "w") as f:
            json.dump(separate_qc, f, indent=2)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), T)
    logits = forward(cfg, R, ids)
    rows = [[float("%.9g" % v) for v in row] for row in logits.tolist()]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"input_ids": ids, "logits": rows, "greedy": greedy(cfg, R, ids[:12], 8)[0],
                   "dequant_fnv1a64": hashes, **(extra or {})}, f, separators=(",", ":"))
    print(name, "max|logit|", float(np.abs(logits).max()), "bytes", os.path.getsize(os.path.join(d, "model.safetensors")))


def make_fp8_seed(name, spec, seed):
    """An FP8 checkpoint of the tiny Llama with an MLP of 256 (so 128 x 128 blocks differ along both
    dimensions of gate/up/down), lm_head left in fp16 (in every FP8 checkpoint's ignore list)."""
    fmt_, strategy, act, bf16 = spec
    rng = np.random.default_rng(seed)
    cfg = dict(BASE, intermediate_size=256, torch_dtype="bfloat16" if bf16 else "float16")
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * (H // cfg["num_attention_heads"])
    f16 = lambda a: a.astype(np.float16)
    T = {"model.embed_tokens.weight": f16(rng.standard_normal((V, H))),
         "model.norm.weight": f16(1 + 0.1 * rng.standard_normal(H)),
         "lm_head.weight": f16(rng.standard_normal((V, H)) * H ** -0.5)}
    R = {n: t.astype(np.float64) for n, t in T.items()}
    shapes = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (kv, H), "self_attn.v_proj": (kv, H),
              "self_attn.o_proj": (H, H), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}
    hashes = {}
    p = "model.layers.0."
    for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
        T[p + norm] = f16(1 + 0.1 * rng.standard_normal(H))
        R[p + norm] = T[p + norm].astype(np.float64)
    for lin in LINEARS:
        out, inp = shapes[lin]
        # Rows of different magnitude, so per-channel and block scales differ from the tensor's.
        W = rng.standard_normal((out, inp)) * inp ** -0.5 * np.exp(rng.uniform(-1, 1, (out, 1)))
        if fmt_ == "ct_int8":
            q, scale, zp, deq = quantize_int8(W, strategy, bf16, act == "dynamic")
            R[p + lin] = deq
            hashes[p + lin] = fnv1a64(deq.astype("<f4").tobytes())
            T[p + lin + ".weight"] = I8(q)
            T[p + lin + ".weight_scale"] = BF16(scale) if bf16 else scale
            if zp is not None:
                T[p + lin + ".weight_zero_point"] = I8(zp)
            if act == "static":
                T[p + lin + ".input_scale"] = np.array([0.02], dtype=np.float32)
            continue
        codes, scale, deq = quantize_fp8(W, strategy, bf16)
        R[p + lin] = deq
        hashes[p + lin] = fnv1a64(deq.astype("<f4").tobytes())
        T[p + lin + ".weight"] = F8(codes)
        if fmt_ == "fp8" and strategy == "block":
            T[p + lin + ".weight_scale_inv"] = scale
        elif strategy == "tensor":
            T[p + lin + ".weight_scale"] = scale.reshape(() if fmt_ == "fp8" else (1,))
        else:
            T[p + lin + ".weight_scale"] = BF16(scale) if bf16 else scale
        if act == "static":  # the activation scale a GPU would quantize with; Cypris does not need it
            T[p + lin + ".input_scale"] = np.array(0.02, dtype=np.float32).reshape(() if fmt_ == "fp8" else (1,))
    if fmt_ == "fp8":
        qc = {"quant_method": "fp8", "activation_scheme": act}
        if strategy == "block":
            qc["weight_block_size"] = [128, 128]
    elif fmt_ == "ct_int8":
        weights = {"num_bits": 8, "type": "int", "symmetric": act == "dynamic", "strategy": strategy,
                   "dynamic": False, "group_size": None, "actorder": None}
        acts = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": act == "dynamic",
                "strategy": "token" if act == "dynamic" else "tensor"}
        qc = {"quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
              "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                                                  "input_activations": acts,
                                                                  "output_activations": None}}}
    else:
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy, "dynamic": False,
                   "group_size": None, "block_structure": None, "actorder": None}
        acts = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": act == "dynamic",
                "strategy": "token" if act == "dynamic" else "tensor"}
        qc = {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
              "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                                                  "input_activations": acts,
                                                                  "output_activations": None}}}
    cfg["quantization_config"] = qc
    ids = rng.integers(0, cfg["vocab_size"], 16).tolist()
    _, gap = greedy(cfg, R, ids[:12], 8)
    if gap < MIN_GREEDY_GAP:
        return False
    write_fixture(name, cfg, T, R, hashes, ids)
    return True


def make_seed(name, spec, seed):
    method, bits, group, sym, v1, act_order, layers, separate = spec[:8]
    extra = spec[8] if len(spec) > 8 else {}
    twin = extra.get("marlin_twin")
    rng = np.random.default_rng(seed)
    cfg = dict(BASE, num_hidden_layers=layers, intermediate_size=extra.get("intermediate_size", BASE["intermediate_size"]))
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    D = H // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * D
    f16 = lambda a: a.astype(np.float16)
    T = {"model.embed_tokens.weight": f16(rng.standard_normal((V, H))),
         "model.norm.weight": f16(1 + 0.1 * rng.standard_normal(H)),
         "lm_head.weight": f16(rng.standard_normal((V, H)) * H ** -0.5)}
    R = {n: t.astype(np.float64) for n, t in T.items()}  # the reference's weights
    hashes, marlin = {}, {}
    shapes = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (kv, H), "self_attn.v_proj": (kv, H),
              "self_attn.o_proj": (H, H), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}
    for li in range(layers):
        p = f"model.layers.{li}."
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            T[p + norm] = f16(1 + 0.1 * rng.standard_normal(H))
            R[p + norm] = T[p + norm].astype(np.float64)
        for lin in LINEARS:
            out, inp = shapes[lin]
            W = rng.standard_normal((out, inp)) * inp ** -0.5
            q, zeros, scales, g_idx = quantize(W, bits, group, sym, rng, act_order, bf16_scales=method == "ct")
            deq = dequantize(q, zeros, scales, g_idx)
            assert (deq.astype(np.float32).astype(np.float64) == deq).all()  # exact in fp32
            R[p + lin] = deq
            hashes[p + lin] = fnv1a64(deq.astype("<f4").tobytes())
            if method == "ct":
                packed, zp = pack_ct(q, zeros, bits, sym)
                T[p + lin + ".weight_packed"] = packed
                T[p + lin + ".weight_scale"] = BF16(scales.T.astype(np.float32))
                T[p + lin + ".weight_shape"] = np.array([out, inp], dtype=np.int64)
                if zp is not None:
                    T[p + lin + ".weight_zero_point"] = zp
                continue
            if method == "gptq":
                qweight, qzeros = pack_gptq(q, zeros, bits, v1)
                T[p + lin + ".g_idx"] = g_idx.astype(np.int32)
                if twin:
                    marlin[p + lin + ".B"], marlin[p + lin + ".s"] = pack_marlin(q, scales, group)
            else:
                qweight, qzeros = pack_awq(q, zeros)
            T[p + lin + ".qweight"], T[p + lin + ".qzeros"], T[p + lin + ".scales"] = qweight, qzeros, scales
    if method == "gptq":
        qc = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": sym,
              "damp_percent": 0.01, "true_sequential": True, "checkpoint_format": "gptq" if v1 else "gptq_v2"}
    elif method == "ct":
        weights = {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "channel" if group == -1 else "group",
                   "group_size": None if group == -1 else group, "dynamic": False, "actorder": None}
        qc = {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
              "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                                                  "input_activations": None,
                                                                  "output_activations": None}}}
    else:
        qc = {"quant_method": "awq", "bits": bits, "group_size": group, "zero_point": True, "version": "gemm"}
    ids = rng.integers(0, cfg["vocab_size"], 16).tolist()
    cont, gap = greedy(cfg, R, ids[:12], 8)
    if gap < MIN_GREEDY_GAP:
        return False
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    if separate:
        qc.pop("quant_method")  # AutoGPTQ's quantize_config.json has none
        with open(os.path.join(d, "quantize_config.json"), "w") as f:
            json.dump(qc, f, indent=2)
    else:
        cfg["quantization_config"] = qc
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), T)
    logits = forward(cfg, R, ids)
    rows = [[float("%.9g" % v) for v in row] for row in logits.tolist()]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"input_ids": ids, "logits": rows, "greedy": cont,
                   "dequant_fnv1a64": hashes}, f, separators=(",", ":"))
    if twin:  # the same layers as Marlin packs them: same reference values, logits and greedy tokens
        td = os.path.join(OUT, twin)
        os.makedirs(td, exist_ok=True)
        tcfg = dict(cfg, quantization_config={"quant_method": "gptq", "bits": bits, "group_size": group,
                                              "desc_act": False, "sym": True, "checkpoint_format": "marlin"})
        with open(os.path.join(td, "config.json"), "w") as f:
            json.dump(tcfg, f, indent=2)
        TT = {n: t for n, t in T.items() if not n.endswith((".qweight", ".qzeros", ".scales", ".g_idx"))}
        TT.update(marlin)
        write_safetensors(os.path.join(td, "model.safetensors"), TT)
        with open(os.path.join(td, "expected.json"), "w") as f:
            json.dump({"input_ids": ids, "logits": rows, "greedy": cont,
                       "dequant_fnv1a64": hashes}, f, separators=(",", ":"))
        print(twin, "bytes", os.path.getsize(os.path.join(td, "model.safetensors")))
    print(name, "seed", seed, "max|logit|", float(np.abs(logits).max()), "greedy gap", round(gap, 3), "bytes",
          os.path.getsize(os.path.join(d, "model.safetensors")))
    return True


# ---------------------------------------------------------------- online quantization references
# What Cypris's -q fp8 / --load-in-8bit / --load-in-4bit must produce from a 16-bit checkpoint
# (kernels/cpu/quant/online_quant.h), step by step in the same precisions: fp32 divisions where
# Cypris divides fp32 values (numpy float32 arithmetic rounds each operation as C++ does), fp16
# scales rounded to nearest even, round-half-even quotients in float64.


def online_fp8(W32):
    amax = np.abs(W32).max(1).astype(np.float32)
    d = amax / np.float32(448)
    d = np.where(d == 0, np.float32(1), d).astype(np.float32)
    x = (W32 / d[:, None]).astype(np.float32)
    codes = e4m3_encode(x.astype(np.float64))
    return (e4m3_decode(codes).astype(np.float32) * d[:, None]).astype(np.float64)


def online_int8(W32):
    amax = np.abs(W32).max(1).astype(np.float32)
    dh = (amax / np.float32(127)).astype(np.float16)
    dh = np.where(dh == 0, np.float16(1), dh)
    d = dh.astype(np.float64)[:, None]
    q = np.clip(np.round(W32.astype(np.float64) / d), -127, 127) + 0.0  # -0.0 -> +0.0: the integer q is 0
    return d * q


def online_int4(W32, group=128):
    out, inp = W32.shape
    deq = np.zeros((out, inp))
    for g0 in range(0, inp, group):
        g = W32[:, g0:g0 + group]
        lo = np.minimum(g.min(1), np.float32(0)).astype(np.float32)
        hi = np.maximum(g.max(1), np.float32(0)).astype(np.float32)
        dh = ((hi - lo).astype(np.float32) / np.float32(15)).astype(np.float16)
        dh = np.where(dh == 0, np.float16(1), dh)
        d = dh.astype(np.float64)[:, None]
        z = np.clip(np.round(-lo.astype(np.float64)[:, None] / d), 0, 15)
        q = np.clip(np.round(g.astype(np.float64) / d) + z, 0, 15)
        deq[:, g0:g0 + group] = d * (q - z)
    return deq


ONLINE = {"fp8": online_fp8, "int8": online_int8, "int4": online_int4}


def make_online_fixture(name="online_f16"):
    """A 16-bit tiny Llama (MLP 256) and, per online method, the reference quantization's dequantized
    layers (hashes), the float64 forward over them and its greedy continuation."""
    for attempt in range(100):
        rng = np.random.default_rng(4242 + 1000 * attempt)
        cfg = dict(BASE, intermediate_size=256)
        H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
        kv = cfg["num_key_value_heads"] * (H // cfg["num_attention_heads"])
        f16 = lambda a: a.astype(np.float16)
        T = {"model.embed_tokens.weight": f16(rng.standard_normal((V, H))),
             "model.norm.weight": f16(1 + 0.1 * rng.standard_normal(H)),
             "lm_head.weight": f16(rng.standard_normal((V, H)) * H ** -0.5)}
        p = "model.layers.0."
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            T[p + norm] = f16(1 + 0.1 * rng.standard_normal(H))
        shapes = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (kv, H), "self_attn.v_proj": (kv, H),
                  "self_attn.o_proj": (H, H), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H),
                  "mlp.down_proj": (H, I)}
        for lin in LINEARS:
            out, inp = shapes[lin]
            T[p + lin + ".weight"] = f16(rng.standard_normal((out, inp)) * inp ** -0.5 *
                                         np.exp(rng.uniform(-1, 1, (out, 1))))
        ids = rng.integers(0, V, 16).tolist()
        methods, ok = {}, True
        for m, fn in ONLINE.items():
            R = {n: t.astype(np.float64) for n, t in T.items() if not any(l in n for l in LINEARS)}
            hashes = {}
            for lin in LINEARS:
                deq = fn(T[p + lin + ".weight"].astype(np.float32))
                assert (deq.astype(np.float32).astype(np.float64) == deq).all()
                R[p + lin] = deq
                hashes[p + lin] = fnv1a64(deq.astype("<f4").tobytes())
            cont, gap = greedy(cfg, R, ids[:12], 8)
            ok = ok and gap >= MIN_GREEDY_GAP
            logits = forward(cfg, R, ids)
            methods[m] = {"dequant_fnv1a64": hashes, "greedy": cont,
                          "logits": [[float("%.9g" % v) for v in row] for row in logits.tolist()]}
        if not ok:
            continue
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_safetensors(os.path.join(d, "model.safetensors"), T)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump({"input_ids": ids, "online": methods}, f, separators=(",", ":"))
        print(name, "seed attempt", attempt, "bytes", os.path.getsize(os.path.join(d, "model.safetensors")))
        return
    raise SystemExit(f"{name}: no seed gave greedy continuations without near ties")


def main():
    only = set(sys.argv[1:])
    for name, spec in list(FIXTURES.items()) + list(FP8_FIXTURES.items()):
        if not only or name in only:
            make(name, spec)
    if not only or "online_f16" in only:
        make_online_fixture()


if __name__ == "__main__":
    sys.exit(main())
