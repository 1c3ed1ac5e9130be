"""What the fixture generators and benchmark checkpoint writers under tests/tools/ share: the
safetensors file layout, the config.json of a benchmark-sized Llama, and the search for a seed whose
fixture passes the generator's checks (no near ties in the greedy continuation, ...)."""
import json
import struct


def write_safetensors_entries(path, entries):
    """Writes a safetensors file from {name: (dtype tag, shape, little-endian bytes)}: an 8-byte
    little-endian header length, the JSON header (tensors by name, padded with spaces to 8 bytes),
    the raw data in the same order."""
    header, off = {}, 0
    names = sorted(entries)
    for n in names:
        tag, shape, raw = entries[n]
        header[n] = {"dtype": tag, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for n in names:
            f.write(entries[n][2])
    return off


def add_llama_shape_args(ap):
    """--hidden/--ffn/--layers/--heads/--kv-heads/--vocab of the benchmark checkpoints, by default the
    ~110M Llama of the CPU benchmarks (docs/perf/)."""
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)


def bench_llama_config(a, quantization_config):
    """config.json of the Llama-shaped benchmark checkpoints (make_bench_*.py: fp16 embeddings and
    norms, an untied lm_head), from their --hidden/--ffn/--layers/--heads/--kv-heads/--vocab."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.hidden,
            "intermediate_size": a.ffn, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
            "num_key_value_heads": a.kv_heads, "vocab_size": a.vocab, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
            "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2,
            "quantization_config": quantization_config}


def make_with_some_seed(name, make_seed, attempts=100, why="no seed gave a greedy continuation without near ties"):
    """Calls make_seed(seed) with seeds sum(map(ord, name)) + 1000 * attempt until one returns True
    (the fixture was written); stops the generator with why when none does."""
    for attempt in range(attempts):
        if make_seed(sum(map(ord, name)) + 1000 * attempt):
            return
    raise SystemExit(f"{name}: {why}")
