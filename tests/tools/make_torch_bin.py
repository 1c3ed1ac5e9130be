#!/usr/bin/env python3
"""Writes PyTorch checkpoint files (torch.save's zip + pickle format) without torch, for the tests
of Cypris's safe .bin reader (engine/loader/torch_checkpoint.*).

The layout is torch.save's (torch/serialization.py, _save with the zip file format): a zip archive
of stored entries under one folder: data.pkl (pickle protocol 2 of the state dict), data/<key>
(each storage's raw little-endian bytes), byteorder ("little") and version ("3"). Tensors pickle
as torch.Tensor.__reduce_ex__ does: torch._utils._rebuild_tensor_v2(storage, storage_offset, size,
stride, requires_grad, backward_hooks), and storages as persistent ids ('storage', torch.<T>Storage,
key, location, numel). Python's own pickler writes the opcodes, with stand-in `torch` modules so
the GLOBALs name what torch's would.

usage: make_torch_bin.py OUT_DIR
  OUT_DIR/llama_gqa_tied/pytorch_model.bin  the llama_gqa_tied fixture's safetensors weights, with
      layer 0's k_proj and v_proj sharing one storage (v at an offset), as tied weights do
  OUT_DIR/dtypes.bin      small F32/F16/BF16 tensors, a view at an offset, an I64 tensor
  OUT_DIR/noncontiguous.bin  a transposed (non-contiguous) tensor
  OUT_DIR/evil_system.bin a pickle that calls os.system when Python loads it
  OUT_DIR/evil_eval.bin   a pickle that calls builtins.eval
  OUT_DIR/evil_global_in_tensor.bin  a tensor whose storage type is os.system
  OUT_DIR/legacy.bin      a plain pickle (torch.save before 1.6): not a zip archive
  OUT_DIR/deep.bin        a pickle of 100000 nested tuples (a reader that recursed would overflow)
"""
import collections
import json
import os
import pickle
import struct
import sys
import types
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Stand-ins so that pickle writes GLOBAL torch FloatStorage / torch._utils _rebuild_tensor_v2.
torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
for name in ("FloatStorage", "HalfStorage", "BFloat16Storage", "LongStorage"):
    cls = type(name, (), {})
    cls.__module__ = "torch"
    setattr(torch, name, cls)


def _rebuild_tensor_v2(*args):
    raise RuntimeError("stand-in only")


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2
torch._utils = torch_utils
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch_utils


class Storage:
    def __init__(self, key, storage_type, data, itemsize):
        self.key, self.storage_type, self.data, self.itemsize = key, storage_type, data, itemsize


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2,
                (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.storage_type, obj.key, "cpu", len(obj.data) // obj.itemsize)
        return None


def contiguous_stride(shape):
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return list(reversed(stride))


def write_zip(path, state, storages, raw_pickle=None):
    import io
    buf = io.BytesIO()
    if raw_pickle is None:
        Pickler(buf, protocol=2).dump(state)
    else:
        buf.write(raw_pickle)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "little")
        for s in storages:
            z.writestr("archive/data/" + s.key, s.data)
        z.writestr("archive/version", "3\n")


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32"
        b, end = e["data_offsets"]
        out[name] = (e["shape"], raw[8 + n + b:8 + n + end])
    return out


def f32_to_bf16(data):
    vals = struct.unpack("<%df" % (len(data) // 4), data)
    out = bytearray()
    for v in vals:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        out += struct.pack("<H", bits >> 16)
    return bytes(out)


def main(out_dir):
    os.makedirs(os.path.join(out_dir, "llama_gqa_tied"), exist_ok=True)
    weights = read_safetensors(os.path.join(ROOT, "fixtures/models/llama_gqa_tied/model.safetensors"))
    state = collections.OrderedDict()
    storages = []
    k_name = "model.layers.0.self_attn.k_proj.weight"
    v_name = "model.layers.0.self_attn.v_proj.weight"
    for name, (shape, data) in weights.items():
        if name == v_name:
            continue
        if name == k_name:
            # k and v in one storage, v after k (tensor views of one storage, as tied weights are).
            v_shape, v_data = weights[v_name]
            s = Storage(str(len(storages)), torch.FloatStorage, data + v_data, 4)
            storages.append(s)
            state[name] = Tensor(s, 0, shape, contiguous_stride(shape))
            state[v_name] = Tensor(s, len(data) // 4, v_shape, contiguous_stride(v_shape))
            continue
        s = Storage(str(len(storages)), torch.FloatStorage, data, 4)
        storages.append(s)
        state[name] = Tensor(s, 0, shape, contiguous_stride(shape))
    write_zip(os.path.join(out_dir, "llama_gqa_tied", "pytorch_model.bin"), state, storages)

    # dtypes.bin: [1.5, -2, 0.25, 3] as F32, F16 and BF16; "t" a transposed 2x3 view.
    vals = [1.5, -2.0, 0.25, 3.0]
    f32 = struct.pack("<4f", *vals)
    f16 = struct.pack("<4e", *vals)
    s32 = Storage("0", torch.FloatStorage, f32, 4)
    s16 = Storage("1", torch.HalfStorage, f16, 2)
    sbf = Storage("2", torch.BFloat16Storage, f32_to_bf16(f32), 2)
    six = Storage("3", torch.FloatStorage, struct.pack("<6f", 0, 1, 2, 3, 4, 5), 4)
    lng = Storage("4", torch.LongStorage, struct.pack("<2q", 7, 9), 8)
    state = collections.OrderedDict()
    state["f32"] = Tensor(s32, 0, [2, 2], [2, 1])
    state["f16"] = Tensor(s16, 0, [4], [1])
    state["bf16"] = Tensor(sbf, 0, [4], [1])
    state["tail"] = Tensor(s32, 2, [2], [1])  # the last two elements of the F32 storage
    state["ids"] = Tensor(lng, 0, [2], [1])
    write_zip(os.path.join(out_dir, "dtypes.bin"), state, [s32, s16, sbf, lng])
    write_zip(os.path.join(out_dir, "noncontiguous.bin"), {"t": Tensor(six, 0, [3, 2], [1, 3])}, [six])

    class System:
        def __reduce__(self):
            return (os.system, ("echo cypris-was-pwned > /tmp/cypris-pwned",))

    class Eval:
        def __reduce__(self):
            return (eval, ("__import__('os').system('echo cypris-was-pwned > /tmp/cypris-pwned')",))

    write_zip(os.path.join(out_dir, "evil_system.bin"), collections.OrderedDict(w=System()), [])
    write_zip(os.path.join(out_dir, "evil_eval.bin"), {"w": Eval()}, [])
    bad = Storage("0", os.system, f32, 4)
    write_zip(os.path.join(out_dir, "evil_global_in_tensor.bin"), {"w": Tensor(bad, 0, [4], [1])}, [bad])
    write_zip(os.path.join(out_dir, "deep.bin"), None, [], raw_pickle=b"\x80\x02N" + b"\x85" * 100000 + b".")
    with open(os.path.join(out_dir, "legacy.bin"), "wb") as f:
        pickle.dump({"w": [1.0, 2.0]}, f, protocol=2)


if __name__ == "__main__":
    main(sys.argv[1])
