#!/usr/bin/env python3
"""Independent Philox4x32-10 in plain Python: prints the known-answer vectors that
tests/unit/kernels/philox_test.cpp asserts (they match Random123's kat_vectors for philox4x32_10)."""
M0, M1, W0, W1, MASK = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c, k = list(ctr), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + W0) & MASK, (k[1] + W1) & MASK]
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK]
    return c


for ctr, key in [([0, 0, 0, 0], [0, 0]),
                 ([MASK] * 4, [MASK] * 2),
                 ([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0])]:
    print(" ".join(f"{x:08x}" for x in ctr + key), "->", " ".join(f"{x:08x}" for x in philox4x32_10(ctr, key)))
