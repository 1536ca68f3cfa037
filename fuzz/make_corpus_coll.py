#!/usr/bin/env python3
"""Seeds for fuzz/coll_wire_fuzz.c: one valid header of every message
type and flag combination (control byte, then the header, as the target
reads it). Writes into fuzz/corpus/coll_wire/ (or the directory given)."""
import os
import struct
import sys

VERSION, WIRE = 1, 32
P2P, ACK, COLL, ABORT, CMA, POKE = 1, 2, 3, 4, 5, 6
F_CMA, F_RESEND, F_MBOX = 1, 2, 4


def fixed(typ, dtype=0, ndim=0, flags=0, nbytes=0, tag=7):
    return struct.pack(">BBBBIIIIBxxxQ", VERSION, typ, dtype, ndim, 3,
                       0xabcdef01, 42, tag, flags, nbytes)


def seeds():
    shape = struct.pack(">QQ", 2, 3)
    offer = struct.pack(">IIQQQ", 1234, 5, 99, 77, 1 << 20)
    desc = struct.pack(">BBBBiQ", 1, 0, 0, 1, -1, 6)
    yield "p2p", 1, fixed(P2P, 0, 2, 0, 24) + shape
    yield "p2p_0d", 1, fixed(P2P, 3, 0, 0, 8)
    yield "p2p_cma", 0, fixed(P2P, 0, 2, F_CMA, 1 << 20) + shape + offer
    yield "p2p_resend", 1, fixed(P2P, 0, 2, F_RESEND, 24) + shape
    yield "ack", 0, fixed(ACK, 0, 2) + struct.pack(">i", 0) + shape
    yield "ack_err", 0, fixed(ACK, 0, 2) + struct.pack(">i", -9) + shape
    yield "ack_mbox", 0, (fixed(ACK, 0, 2, F_MBOX) + struct.pack(">i", 0) +
                          shape + offer)
    yield "coll", 1, fixed(COLL, 0, 0, 0, 24) + desc
    yield "coll_cma", 0, fixed(COLL, 0, 0, F_CMA, 1 << 20) + desc + offer
    yield "cma", 0, fixed(CMA) + struct.pack(">I", 2)
    text = b"coll: all_reduce timed out"
    yield "abort", 0, fixed(ABORT) + struct.pack(">H", len(text)) + text
    yield "poke", 0, fixed(POKE)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "corpus", "coll_wire")
    os.makedirs(out, exist_ok=True)
    for name, n_bodies, header in seeds():
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(bytes([n_bodies]) + header)


if __name__ == "__main__":
    main()
