"""XXH64 (seed 0 by default): the `xxhash` module when importable, else pure Python.

The pure-Python fallback follows Yann Collet's specification; it is slow (a few MB/s) and only
meant for small standalone checkpoints on a Python without `xxhash` (Debian: python3-xxhash).

Example::

    from baton._xxh64 import Hasher, xxh64_hex
    h = Hasher()
    h.update(b"hello")
    assert h.hexdigest() == xxh64_hex(b"hello") == "26c7827d889f6da3"
"""
from __future__ import annotations

import struct
from typing import Union

__all__ = ["Hasher", "xxh64_hex", "HAVE_XXHASH", "file_xxh64"]

_MASK = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5

Bytes = Union[bytes, bytearray, memoryview]


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


class PureHasher:
    """Streaming XXH64 in pure Python (the `xxhash.xxh64` interface subset baton uses)."""

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed
        self._v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed, (seed - _P1) & _MASK]
        self._buf = b""
        self._total = 0

    def update(self, data: Bytes) -> None:
        data = bytes(data)
        self._total += len(data)
        data = self._buf + data
        n = len(data) - len(data) % 32
        v1, v2, v3, v4 = self._v
        unpack = struct.unpack_from
        for i in range(0, n, 32):
            a, b, c, d = unpack("<4Q", data, i)
            v1 = _round(v1, a)
            v2 = _round(v2, b)
            v3 = _round(v3, c)
            v4 = _round(v4, d)
        self._v = [v1, v2, v3, v4]
        self._buf = data[n:]

    def intdigest(self) -> int:
        data, total = self._buf, self._total
        if total >= 32:
            v = self._v
            h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
            for a in v:
                h ^= _round(0, a)
                h = (h * _P1 + _P4) & _MASK
        else:
            h = (self._seed + _P5) & _MASK
        h = (h + total) & _MASK
        i, n = 0, len(data)
        while i + 8 <= n:
            h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
            h = (_rotl(h, 27) * _P1 + _P4) & _MASK
            i += 8
        if i + 4 <= n:
            h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & _MASK
            h = (_rotl(h, 23) * _P2 + _P3) & _MASK
            i += 4
        while i < n:
            h ^= (data[i] * _P5) & _MASK
            h = (_rotl(h, 11) * _P1) & _MASK
            i += 1
        h ^= h >> 33
        h = (h * _P2) & _MASK
        h ^= h >> 29
        h = (h * _P3) & _MASK
        h ^= h >> 32
        return h

    def hexdigest(self) -> str:
        return "%016x" % self.intdigest()


try:  # C speed when available (Debian: python3-xxhash)
    import xxhash as _xxhash

    HAVE_XXHASH = True

    def Hasher(seed: int = 0):  # noqa: N802 - a factory that reads like the class it returns
        """A streaming XXH64 hasher (`xxhash.xxh64`)."""
        return _xxhash.xxh64(seed=seed)

except ImportError:  # pragma: no cover - depends on the interpreter
    HAVE_XXHASH = False
    Hasher = PureHasher  # type: ignore[misc,assignment]


def xxh64_hex(data: Bytes, seed: int = 0) -> str:
    """XXH64 of `data` as 16 lowercase hex digits."""
    h = Hasher(seed)
    h.update(data)
    return h.hexdigest()


def file_xxh64(path, chunk: int = 1 << 20) -> "tuple[int, str]":
    """(size, xxh64 hex) of a file, streamed in 1 MiB chunks."""
    h = Hasher()
    size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            size += len(block)
            h.update(block)
    return size, h.hexdigest()
