"""Hostile queue message bodies: decompression bombs and parser traps."""

from __future__ import annotations

import base64
import functools
import gzip
import json
import struct
import zlib

CHUNK = 16 * 1024 * 1024


@functools.cache
def gzip_of_zeros(total: int) -> bytes:
    """A gzip stream inflating to `total` zero bytes (a multiple of 16 MiB), built fast.

    One chunk is compressed once, ending in a full flush (byte-aligned, no references
    back), and repeated; the trailer carries the CRC and size of the whole.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(bytes(CHUNK)) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.flush()
    count = total // CHUNK
    crc = 0
    zero = bytes(CHUNK)
    for _ in range(count):
        crc = zlib.crc32(zero, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * count + tail + struct.pack("<II", crc, (CHUNK * count) & 0xFFFFFFFF)


def packed(data: bytes) -> str:
    """Bytes as the forwarder sends them: base64 text."""
    return base64.b64encode(data).decode()


def sns(message: str) -> str:
    """An SNS notification envelope around a message."""
    return json.dumps({"Type": "Notification", "MessageId": "n-1", "Message": message})


def poison_bodies() -> dict[str, str]:
    """Each kind of message that can never become an event (all fit in one SQS message)."""
    bomb = gzip_of_zeros(64 * CHUNK // 16)  # 64 MiB of zeros in ~65 KB
    return {
        "deep_nesting": "[" * 200_000,
        "huge_integer": '{"object_kind": "merge_request", "n": ' + "9" * 5000 + "}",
        "nan": '{"object_kind": "merge_request", "object_attributes": {"iid": NaN}}',
        "gzip_bomb": packed(bomb),
        "two_layer_bomb": packed(gzip.compress(gzip_of_zeros(1024**3), 9)),
        "bomb_in_sns": sns(packed(bomb)),
        "not_json": "poison {",
        "not_an_event": json.dumps([1, 2, 3]),
    }
