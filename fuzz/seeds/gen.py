#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets (fuzz/seeds/TARGET/).

Sources, both in data/prm/:
- trace-mlx5_core-cx4.txt, the real ConnectX-4 command trace (Linux
  mlx5_core, firmware 14.12.1220): one text seed per distinct opcode (the
  first INPUT/OUTPUT exchange of it) for `trace`; the OUTPUT dumps' bytes
  (entry + mailbox blocks) for `cmd_output` and `driver_answer`.
- libmlx5-vectors.json, rdma-core's mlx5 provider golden vectors: the CQE
  images of every poll vector for `cqe`.
`eqe` and `health` get hand-made entries (a field each, as the PRM places it).

Run from the repository root: python3 fuzz/seeds/gen.py
"""
import json
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "fuzz", "seeds")
TRACE = os.path.join(ROOT, "data", "prm", "trace-mlx5_core-cx4.txt")
VECTORS = os.path.join(ROOT, "data", "prm", "libmlx5-vectors.json")

HEADER = re.compile(r"dump command .*\((0x[0-9a-f]+)\) (INPUT|OUTPUT)$")
HEXLINE = re.compile(r"^(?:\[[^\]]*\]\s*)?([0-9a-f]{3,}): ((?:[0-9a-f]{8} ?){4})$")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    mode = "w" if isinstance(data, str) else "wb"
    with open(os.path.join(d, name), mode) as f:
        f.write(data)


def trace_dumps(lines):
    """(line index of header, opcode, direction, bytes, end line index)."""
    dumps = []
    i = 0
    while i < len(lines):
        m = HEADER.search(lines[i].rstrip())
        if not m:
            i += 1
            continue
        op, direction = int(m.group(1), 16), m.group(2)
        data = b""
        j = i + 1
        while j < len(lines):
            s = lines[j].rstrip()
            h = HEXLINE.match(s)
            if h:
                data += bytes.fromhex(h.group(2).replace(" ", ""))
            elif "command block:" in s or s == "":
                pass
            elif HEADER.search(s) or data:
                # Another message after the hex of this dump.
                if HEADER.search(s) or "dump command" in s:
                    break
                if not s.endswith("command block:"):
                    break
            j += 1
        dumps.append((i, op, direction, data, j))
        i = j
    return dumps


def main():
    lines = open(TRACE).read().split("\n")
    dumps = trace_dumps(lines)
    seen = set()
    for k, (start, op, direction, data, _end) in enumerate(dumps):
        if direction == "OUTPUT":
            continue
        if op in seen:
            continue
        seen.add(op)
        # The exchange: this INPUT through its OUTPUT dump.
        out = next((d for d in dumps[k + 1:] if d[2] == "OUTPUT" and d[1] == op), None)
        end = out[4] if out else dumps[k][4]
        text = "\n".join(lines[start:end]) + "\n"
        put("trace", "%04x.txt" % op, text)
        if out:
            put("cmd_output", "%04x.bin" % op, out[3])
            # Posted as the entry says (bit 5), pointers put in (bit 1), the
            # reader that fits the command (bits 2..5).
            reader = {0x100: 0, 0x108: 1}.get(op, 4)
            put("driver_answer", "%04x.bin" % op, bytes([0, 0x22 | reader << 2, 0, 0]) + out[3])

    v = json.load(open(VECTORS))
    for vec in v["cqe"]:
        cqes = sorted(vec["cqes"], key=lambda c: c["slot"])
        # CQE version 1, 16 entries, poll path 0, owner bits as recorded,
        # consumer index 0; byte 1 = 0.
        data = bytes([0x02 | 0x20, 0]) + b"".join(bytes.fromhex(c["bytes"]) for c in cqes)
        put("cqe", vec["name"] + ".bin", data)

    def eqe(event_type, sub, data, owner=0):
        b = bytearray(64)
        b[1], b[3] = event_type, sub
        b[0x20:0x20 + len(data)] = data
        b[0x3f] = owner
        return bytes(b)

    # Configuration: EQ kind (0 command, 1 async, 2 completion), log2 size
    # 4, 32 command slots, 1 port, slot 0 in flight.
    def cfg(kind):
        return bytes([kind, 4, 5, 1]) + struct.pack(">I", 1)

    put("eqe", "cmd.bin", cfg(0) + eqe(0x0a, 0, struct.pack(">I", 1)))
    put("eqe", "comp.bin", cfg(2) + eqe(0x00, 0, b"\0" * 0x18 + struct.pack(">I", 7)))
    put("eqe", "page_request.bin", cfg(1) + eqe(0x0b, 0, struct.pack(">HHi", 0, 0, 16)))
    put("eqe", "port_active.bin", cfg(1) + eqe(0x09, 4, b"\0" * 8 + bytes([0x10])))
    put("eqe", "cq_error.bin", cfg(1) + eqe(0x04, 0, struct.pack(">I", 7) + b"\0\0\0\x01"))
    put("eqe", "qp_event.bin", cfg(1) + eqe(0x07, 0, b"\0" * 0x14 + struct.pack(">I", 0x123)))

    health = bytearray(64)
    health[0x30:0x34] = struct.pack(">I", 0x000e000c)
    # Then: 1 s between polls, period 1 s, a counter that keeps moving.
    polls = bytes([10, 10]) + b"".join(struct.pack(">III", 0x000e000c, 0, c) for c in (1, 2, 3, 3, 3, 3))
    put("health", "alive.bin", bytes(health) + struct.pack(">IIII", 0x12, 0, 0x000c000e, 0x000504bc) + polls)
    health[0x3c:0x40] = struct.pack(">I", 0x00010000)
    put("health", "fw_err.bin", bytes(health) + struct.pack(">IIII", 0x12, 0, 0x000c000e, 0x000504bc))
    put("health", "gone.bin", b"\xff" * 80)


if __name__ == "__main__":
    main()
