"""Google's CityHash64 (v1.0.3, the version Mozilla ships), for Thunderbird's install hash."""

from __future__ import annotations

__all__ = ["city_hash64"]

_M64 = (1 << 64) - 1
_K0, _K1, _K2, _K3 = 0xC3A5C85C97CB3127, 0xB492B66FBE98F273, 0x9AE16A3B2F90404F, 0xC949D7C7509E6557


def _f64(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 8], "little")


def _f32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "little")


def _rot(value: int, shift: int) -> int:
    return value if shift == 0 else ((value >> shift) | (value << (64 - shift))) & _M64


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def _hash16(u: int, v: int) -> int:
    mul = 0x9DDFEA08EB382D69
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _weak32(data: bytes, at: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _f64(data, at), _f64(data, at + 8), _f64(data, at + 16), _f64(data, at + 24)
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def _city_short(data: bytes) -> int:
    n = len(data)
    if n > 16:  # 17 to 32 bytes
        a, b = (_f64(data, 0) * _K1) & _M64, _f64(data, 8)
        c, d = (_f64(data, n - 8) * _K2) & _M64, (_f64(data, n - 16) * _K0) & _M64
        return _hash16((_rot((a - b) & _M64, 43) + _rot(c, 30) + d) & _M64, (a + _rot(b ^ _K3, 20) - c + n) & _M64)
    if n > 8:
        a, b = _f64(data, 0), _f64(data, n - 8)
        return _hash16(a, _rot((b + n) & _M64, n)) ^ b
    if n >= 4:
        return _hash16((n + (_f32(data, 0) << 3)) & _M64, _f32(data, n - 4))
    if n:
        y, z = data[0] + (data[n >> 1] << 8), n + (data[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K3)) & _M64) * _K2) & _M64
    return _K2


def _city_medium(data: bytes) -> int:  # 33 to 64 bytes
    n = len(data)
    z, a = _f64(data, 24), (_f64(data, 0) + (n + _f64(data, n - 16)) * _K0) & _M64
    b, c = _rot((a + z) & _M64, 52), _rot(a, 37)
    a = (a + _f64(data, 8)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _f64(data, 16)) & _M64
    vf, vs = (a + z) & _M64, (b + _rot(a, 31) + c) & _M64
    a, z = (_f64(data, 16) + _f64(data, n - 32)) & _M64, _f64(data, n - 8)
    b, c = _rot((a + z) & _M64, 52), _rot(a, 37)
    a = (a + _f64(data, n - 24)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _f64(data, n - 16)) & _M64
    wf, ws = (a + z) & _M64, (b + _rot(a, 31) + c) & _M64
    r = _shift_mix(((vf + ws) * _K2 + (wf + vs) * _K0) & _M64)
    return (_shift_mix((r * _K0 + vs) & _M64) * _K2) & _M64


def city_hash64(data: bytes) -> int:
    """CityHash64 of ``data``, as Mozilla computes it (:func:`.thunderbird.install_hash`)."""
    n = len(data)
    if n <= 32:
        return _city_short(data)
    if n <= 64:
        return _city_medium(data)
    x, y = _f64(data, n - 40), (_f64(data, n - 16) + _f64(data, n - 56)) & _M64
    z = _hash16((_f64(data, n - 48) + n) & _M64, _f64(data, n - 24))
    v, w = _weak32(data, n - 64, n, z), _weak32(data, n - 32, (y + _K1) & _M64, x)
    x = (x * _K1 + _f64(data, 0)) & _M64
    for at in range(0, (n - 1) & ~63, 64):
        x = (_rot((x + y + v[0] + _f64(data, at + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _f64(data, at + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y = (y + v[0] + _f64(data, at + 40)) & _M64
        z = (_rot((z + w[0]) & _M64, 33) * _K1) & _M64
        v = _weak32(data, at, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32(data, at + 32, (z + w[1]) & _M64, (y + _f64(data, at + 16)) & _M64)
        z, x = x, z
    return _hash16((_hash16(v[0], w[0]) + _shift_mix(y) * _K1 + z) & _M64, (_hash16(v[1], w[1]) + x) & _M64)
