#!/usr/bin/env python3
"""Checks the ICRC of every RoCE frame in a pcap file, independently of
the emulator (zlib's CRC-32 over the masked headers, as the InfiniBand
Architecture Specification's RoCE annexes A16 (RoCE, EtherType 0x8915) and
A17 (RoCE v2, UDP port 4791) define it: 64 bits of ones in place of the
LRH, then the GRH or IPv4/IPv6 header and UDP header with their variant
fields set to ones, then the BTH with its reserved byte set to ones, then
the rest of the packet up to the ICRC, which follows as a little-endian
32-bit word). tshark's InfiniBand dissector (Wireshark 4.0) shows the
ICRC but does not check it, hence this script.

Usage: roce_icrc.py FILE.pcap; prints one line per bad frame and a
summary; exits 1 if any frame is not RoCE or has a wrong ICRC, or if the
file holds no frame.
"""
import struct
import sys
import zlib

ROCE_V2_PORT = 4791


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise SystemExit(f"{path}: not a classic pcap file")
    linktype = struct.unpack(e + "I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit(f"{path}: link type {linktype}, not Ethernet (1)")
    at, n = 24, 0
    while at + 16 <= len(data):
        caplen, length = struct.unpack(e + "II", data[at + 8:at + 16])
        n += 1
        yield n, data[at + 16:at + 16 + caplen], caplen == length
        at += 16 + caplen


def masked_grh(h):
    """A GRH or IPv6 header with traffic class, flow label and hop limit
    set to ones (the version nibble kept)."""
    h = bytearray(h)
    h[0] |= 0x0F
    h[1] = h[2] = h[3] = 0xFF
    h[7] = 0xFF
    return bytes(h)


def check(frame):
    """Returns None if the frame is RoCE with a good ICRC, else why not."""
    if len(frame) < 14:
        return "shorter than an Ethernet header"
    etype = struct.unpack(">H", frame[12:14])[0]
    off = 14
    while etype in (0x8100, 0x88A8):
        etype = struct.unpack(">H", frame[off + 2:off + 4])[0]
        off += 4
    if etype == 0x8915:  # RoCE (v1): GRH, BTH...
        grh = frame[off:off + 40]
        paylen = struct.unpack(">H", grh[4:6])[0]
        end = off + 40 + paylen
        pseudo = masked_grh(grh)
        bth_at = off + 40
    elif etype == 0x0800:
        ihl = (frame[off] & 0x0F) * 4
        total = struct.unpack(">H", frame[off + 2:off + 4])[0]
        if frame[off + 9] != 17:
            return "IPv4 but not UDP"
        ip = bytearray(frame[off:off + ihl])
        ip[1] = 0xFF  # type of service (DSCP, ECN)
        ip[8] = 0xFF  # time to live
        ip[10] = ip[11] = 0xFF  # header checksum
        udp_at = off + ihl
        end = off + total
        pseudo = bytes(ip)
    elif etype == 0x86DD:
        if frame[off + 6] != 17:
            return "IPv6 but not UDP (or with extension headers)"
        paylen = struct.unpack(">H", frame[off + 4:off + 6])[0]
        udp_at = off + 40
        end = udp_at + paylen
        pseudo = masked_grh(frame[off:off + 40])
    else:
        return f"EtherType 0x{etype:04x} is not RoCE"
    if etype != 0x8915:
        udp = bytearray(frame[udp_at:udp_at + 8])
        dport = struct.unpack(">H", udp[2:4])[0]
        if dport != ROCE_V2_PORT:
            return f"UDP port {dport}, not {ROCE_V2_PORT}"
        udp[6] = udp[7] = 0xFF  # UDP checksum
        pseudo += bytes(udp)
        bth_at = udp_at + 8
    if end > len(frame) or end - bth_at < 12 + 4:
        return f"truncated (headers say {end} bytes, frame has {len(frame)})"
    bth = bytearray(frame[bth_at:bth_at + 12])
    bth[4] = 0xFF  # reserved byte of the BTH (resv8a)
    covered = b"\xff" * 8 + pseudo + bytes(bth) + frame[bth_at + 12:end - 4]
    want = zlib.crc32(covered) & 0xFFFFFFFF
    got = struct.unpack("<I", frame[end - 4:end])[0]
    if want != got:
        return f"ICRC 0x{got:08x} on the wire, 0x{want:08x} computed"
    return None


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: roce_icrc.py FILE.pcap")
    bad = total = 0
    for n, frame, whole in frames(sys.argv[1]):
        total += 1
        why = "truncated capture" if not whole else check(frame)
        if why:
            bad += 1
            if bad <= 10:
                print(f"frame {n}: {why}")
    print(f"{total} frames, {total - bad} with a good ICRC, {bad} bad")
    sys.exit(1 if bad or total == 0 else 0)


if __name__ == "__main__":
    main()
