#!/usr/bin/env python3
"""Generates the power-of-ten table of accel_trackers.h's shortest double formatting (section 5) and checks the
integer logarithm formulas the formatter uses, with exact integer arithmetic (no floating point).

For each e in [-292, 324]: r(e) = floor(log2(10^e)) - 125 and g(e) = floor(10^e / 2^r(e)) + 1, so that
2^125 < g(e) <= 2^126 (an over-estimate of 10^e scaled to 126 bits). Printed as {g >> 63, g mod 2^63} pairs.
usage: python3 scripts/gen_track_pow10.py > table.txt (then paste over accel__track_pow10 in accel_trackers.h)"""

E_MIN, E_MAX = -292, 324


def floor_log2_pow10(e):
    """floor(log2(10^e)), exact"""
    if e >= 0:
        return (10 ** e).bit_length() - 1
    # 10^e = 1 / 10^-e: floor(log2) = -ceil(log2(10^-e))
    d = 10 ** -e
    n = d.bit_length()  # 2^(n-1) <= d < 2^n
    return -(n - 1) if d == 1 << (n - 1) else -n


def floor_log10_pow2(q, three_quarters=False):
    """floor(log10(2^q)) or floor(log10(3/4 * 2^q)), exact"""
    # x = num / den
    num, den = (1 << q, 1) if q >= 0 else (1, 1 << -q)
    if three_quarters:
        num, den = num * 3, den * 4
    k = 0
    while num >= den * 10:
        den *= 10
        k += 1
    while num < den:
        num *= 10
        k -= 1
    return k


def g_of(e):
    r = floor_log2_pow10(e) - 125
    if e >= 0:
        n, d = 10 ** e, 1
    else:
        n, d = 1, 10 ** -e
    if r >= 0:
        d <<= r
    else:
        n <<= -r
    g = n // d + 1
    assert (1 << 125) < g <= (1 << 126), e
    return g


def main():
    # the formulas of accel_trackers.h, checked over every exponent they see (and some margin)
    for e in range(-400, 401):
        assert (e * 1741647) >> 19 == floor_log2_pow10(e), e
    for q in range(-1200, 1100):
        assert (q * 315653) >> 20 == floor_log10_pow2(q), q
        assert (q * 315653 - 131237) >> 20 == floor_log10_pow2(q, True), q
    rows = []
    for e in range(E_MIN, E_MAX + 1):
        g = g_of(e)
        rows.append("{0x%016XU, 0x%016XU}" % (g >> 63, g & ((1 << 63) - 1)))
    for i in range(0, len(rows), 2):
        print("    " + ", ".join(rows[i:i + 2]) + ",")


if __name__ == "__main__":
    main()
