#!/usr/bin/env python3
"""Write seed inputs for fuzz/store_frame_fuzz, fuzz/safetensors_fuzz and
fuzz/idx_fuzz into fuzz/corpus/{store_frame,safetensors,idx}: valid inputs
of every kind (frames of each request and reply type, a safetensors file of
several dtypes, raw and gzip IDX files), so each fuzzer starts deep inside
its decoder. Usage: make_corpus_files.py [FUZZ_DIR]"""
import gzip
import json
import os
import struct
import sys

base = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def write(sub, name, data):
    d = os.path.join(base, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- store frames: u8 version | u8 type | u16 0 | u32 len, then payload
def s(b):
    return struct.pack(">I", len(b)) + b


def frame(t, payload):
    return struct.pack(">BBHI", 1, t, 0, len(payload)) + payload


frames = {
    "auth": frame(0x02, b"\x07" * 64),
    "set": frame(0x10, s(b"td/addr/3") + s(b"\x00\x01worker-address")),
    "get": frame(0x11, s(b"td/addr/3")),
    "wait": frame(0x12, struct.pack(">QI", 5000, 3) + s(b"a") + s(b"b/c") + s(b"")),
    "wait_forever": frame(0x12, struct.pack(">QI", 2**64 - 1, 1) + s(b"k")),
    "add": frame(0x13, s(b"td/fin/0/sent") + struct.pack(">q", -7)),
    "cas": frame(0x14, s(b"k") + s(b"old") + s(b"new")),
    "del": frame(0x15, s(b"k")),
    "numkeys": frame(0x16, b""),
    "rep_ok": frame(0x80, b""),
    "rep_value": frame(0x81, s(b"value")),
    "rep_int": frame(0x82, struct.pack(">q", 42)),
    "rep_notfound": frame(0x83, b""),
    "rep_timeout": frame(0x84, struct.pack(">Q", 1)),
    "rep_error": frame(0x85, struct.pack(">q", -5) + s(b"store: malformed request")),
}
for name, data in frames.items():
    write("store_frame", name, data)


# ---- safetensors: u64 LE header length, JSON header, data
def safetensors(tensors, meta=None, pad=0):
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, (dtype, shape, raw) in tensors.items():
        hdr[name] = {"dtype": dtype, "shape": shape,
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + data


write("safetensors", "two", safetensors({
    "x": ("F32", [2, 3], struct.pack("<6f", *range(6))),
    "w": ("F64", [3], struct.pack("<3d", 1.5, -2, 3))}, pad=3))
write("safetensors", "meta", safetensors({
    "w": ("I64", [2], struct.pack("<2q", 1, 2)),
    "x": ("U8", [4], b"\x01\x02\x03\x04")}, meta={"format": "pt"}))
write("safetensors", "empty", safetensors({"x": ("F32", [0], b"")}))
write("safetensors", "scalar", safetensors({"x": ("I32", [], struct.pack("<i", 7))}))
write("safetensors", "none", safetensors({}))


# ---- IDX: 0 0 type ndim, be32 dims, unsigned bytes
def idx(shape, fill=1):
    n = 1
    for d in shape:
        n *= d
    return bytes([0, 0, 8, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape) + \
        bytes((i * fill) & 255 for i in range(n))


write("idx", "raw_2x3", idx([2, 3]))
write("idx", "raw_labels", idx([10], 3))
write("idx", "gz_images", gzip.compress(idx([2, 4, 4], 7)))
write("idx", "gz_4d", gzip.compress(idx([1, 2, 2, 2], 5)))
