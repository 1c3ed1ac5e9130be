#!/usr/bin/env python3
"""Prints "WIDTH HEIGHT DISTINCT_COLOURS NON_BACKGROUND_FRACTION" for an 8-bit RGB/RGBA PNG.

An independent reader (Python's zlib, not the app's encoder) used by the UI e2e tests to check a
screenshot is a real, non-blank picture. Handles all five PNG filter types.
"""
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat, w, h, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        ctype_name = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        if zlib.crc32(ctype_name + body) != crc:
            raise SystemExit(f"{path}: bad CRC in {ctype_name!r}")
        if ctype_name == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                raise SystemExit(f"{path}: only 8-bit RGB/RGBA supported")
        elif ctype_name == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else (b if pb <= pc else c))) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = read_png(sys.argv[1])
    counts = {}
    for row in rows[::4]:
        for x in range(0, w * bpp, bpp * 4):
            px = row[x:x + 3]
            counts[px] = counts.get(px, 0) + 1
    total = sum(counts.values())
    background = max(counts.values())
    print(w, h, len(counts), f"{1 - background / total:.3f}")


if __name__ == "__main__":
    main()
