"""Writes the torch_pickle fuzz target's seed corpus (tests/fuzz/corpus/torch_pickle/).

Each seed is a torch.save file recast in the target's input form: one byte with the
number of storage records R, R little-endian uint16 record sizes, then data.pkl. The
files are torch.save's own output (protocols 2 and 4, an OrderedDict state dict, shared
storages and views, a Parameter, every dtype kvrl reads), kvrl's writer's form, and a
pickle that would run code, which must be refused. Run with the venv's Python:
    ~/.cache/kvrl/venv/bin/python tests/fuzz/make_torch_pickle_seeds.py
"""
import collections
import io
import os
import pickle
import struct
import sys
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "torch_pickle")


def seed(pickle_bytes, record_sizes):
    assert len(record_sizes) < 8
    return bytes([len(record_sizes)]) + b"".join(struct.pack("<H", s) for s in record_sizes) + pickle_bytes


def from_torch_save(value, protocol=2):
    buffer = io.BytesIO()
    torch.save(value, buffer, pickle_protocol=protocol)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        names = archive.namelist()
        program = archive.read(next(n for n in names if n.endswith("/data.pkl")))
        sizes = {}
        for name in names:
            parts = name.split("/")
            if len(parts) == 3 and parts[1] == "data":
                sizes[int(parts[2])] = archive.getinfo(name).file_size
    return seed(program, [sizes[k] for k in range(len(sizes))])


class RunsCode:
    def __reduce__(self):
        return (os.system, ("true",))


def kvrl_writer_form():
    """A dict of a string, an int, a float and a 2x2 float tensor as kvrl's PickleWriter
    (common/io/torch_file.cpp) lays it out: protocol 2, no memo, GLOBAL opcodes."""
    def string(text):
        data = text.encode()
        return b"X" + struct.pack("<I", len(data)) + data

    def integer(value):
        return b"J" + struct.pack("<i", value)

    program = b"\x80\x02}("
    program += string("name") + string("ppo")
    program += string("updates") + integer(12)
    program += string("lr") + b"G" + struct.pack(">d", 3e-4)
    program += string("w") + b"ctorch._utils\n_rebuild_tensor_v2\n("
    program += b"(" + string("storage") + b"ctorch\nFloatStorage\n" + string("0") + string("cpu") + integer(4) + b"tQ"
    program += integer(0) + b"(" + integer(2) + integer(2) + b"t(" + integer(2) + integer(1) + b"t\x89"
    program += b"ccollections\nOrderedDict\n)RtR"
    program += b"u."
    return seed(program, [16])


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    linear = torch.nn.Linear(3, 2)
    base = torch.arange(12, dtype=torch.float32)
    seeds = {
        "state_dict_linear": from_torch_save(linear.state_dict()),
        "state_dict_linear_protocol4": from_torch_save(linear.state_dict(), protocol=4),
        "checkpoint_like_dict": from_torch_save({
            "format_version": 3, "updates": 2**40, "lr": 1e-3, "algorithm": "ppo",
            "flags": [True, False, None], "shape": (2, 3), "negative": -7,
            "tensors": {"long": torch.arange(3), "half": torch.ones(2, dtype=torch.float16),
                        "bool": torch.tensor([True, False]), "bf16": torch.zeros(1, dtype=torch.bfloat16),
                        "int8": torch.tensor([-1, 2], dtype=torch.int8), "u8": torch.tensor([255], dtype=torch.uint8)},
        }),
        "more_dtypes": from_torch_save([torch.tensor([0.5], dtype=torch.float64), torch.tensor([7], dtype=torch.int32),
                                        torch.tensor([9], dtype=torch.int16)]),
        "shared_storage_views": from_torch_save({"slice": base[2:5], "transposed": base.view(3, 4).t(),
                                                 "scalar": base[7], "empty": base[:0]}),
        "parameter": from_torch_save({"p": torch.nn.Parameter(torch.ones(2, 2))}),
        "ordered_dict_nested": from_torch_save(collections.OrderedDict(
            [("a", collections.OrderedDict([("b", torch.zeros(2))])), ("c", [1, 2.5, "x"])])),
        "kvrl_writer_form": kvrl_writer_form(),
        "runs_code_refused": seed(pickle.dumps(RunsCode(), protocol=2), []),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
