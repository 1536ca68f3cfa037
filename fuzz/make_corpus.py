#!/usr/bin/env python3
"""Write seed inputs for fuzz/rpc_wire_fuzz into fuzz/corpus/rpc_wire.

Each seed is a valid message in the fuzzer's input format (u16 header
length, header blob, argument body), built by the wire rules of
runtime/rpc/rpc_wire.h, so the fuzzer starts deep inside the decoder."""
import os
import struct
import sys

MAGIC, VERSION, SENDER = 0xD7, 1, 5
DTYPES = {"f32": (0, 4), "f64": (1, 8), "i64": (2, 8), "i32": (3, 4), "u8": (4, 1)}


def item(kind, v=None):
    if kind == "tensor":
        return struct.pack("<BI", 1, v)
    if kind == "int":
        return struct.pack("<Bq", 2, v)
    if kind == "double":
        return struct.pack("<Bd", 3, v)
    if kind in ("bytes", "string"):
        return struct.pack("<BI", 4 if kind == "bytes" else 5, len(v)) + v
    if kind == "rref":
        return struct.pack("<BiQQ", 6, v[0], v[1], v[2])
    raise ValueError(kind)


def message(mtype, tensors, items, args_in_body=False, ctx=0):
    args = struct.pack("<I", len(items)) + b"".join(items)
    desc = b""
    for dt, shape, rg in tensors:
        desc += struct.pack("<BBBBI", DTYPES[dt][0], len(shape), rg, 0, 0)
        desc += b"".join(struct.pack("<Q", s) for s in shape)
    flags = 1 if args_in_body else 0
    hdr = struct.pack("<BBBBHHIiQQQQ", MAGIC, VERSION, mtype, flags,
                      len(tensors), 0, len(args), SENDER, 42,
                      0xCBF29CE484222325, ctx, 7 if ctx else 0)
    hdr += desc
    body = b""
    if args_in_body:
        body = args
    else:
        hdr += args
    return struct.pack("<H", len(hdr)) + hdr + body


SEEDS = {
    "empty_call": message(1, [], []),
    "scalars": message(1, [], [item("int", -3), item("double", 2.5),
                               item("bytes", b"\x00\x01"),
                               item("string", b"hello")]),
    "tensors": message(1, [("f32", [2, 3], 0), ("i64", [0], 0),
                           ("f64", [], 1)],
                       [item("tensor", 0), item("tensor", 1),
                        item("tensor", 2)], ctx=(1 << 48) | 3),
    "reply_rref": message(2, [], [item("rref", (1, 77, 78))]),
    "error": message(3, [], [item("string", b"Error on rank 1: x"),
                             item("int", 0)]),
    "args_in_body": message(1, [("u8", [4, 4, 4], 0)],
                            [item("string", b"x" * 300), item("tensor", 0)],
                            args_in_body=True),
    "remote": message(4, [], [item("int", 5 << 48 | 1), item("string", b"f")]),
    "dims8": message(1, [("i32", [1, 2, 1, 2, 1, 2, 1, 2], 0)],
                     [item("tensor", 0)]),
}

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", "rpc_wire")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
