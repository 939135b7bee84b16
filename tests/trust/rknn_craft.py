"""A hand-made toolkit2 `.rknn` container (header, FlatBuffer payload, metadata JSON) for crafted-input
tests: objects are laid out parent first, so every FlatBuffer offset points forward as the format wants."""

from __future__ import annotations

import json
import struct

MAGIC = b"RKNN\0\0\0\0"


class Payload:
    """A FlatBuffer payload built by appending objects (absolute positions; offsets patched in)."""

    def __init__(self) -> None:
        self.buf = bytearray(struct.pack("<I", 0) + b"RKNN")

    def _align(self) -> None:
        self.buf += b"\0" * (-len(self.buf) % 4)

    def table(self, nslots: int, present: list[int]) -> dict[int, int]:
        """A table whose `present` slots are uoffset fields; returns slot -> field position (to patch)."""
        self._align()
        vsize, tsize = 4 + 2 * nslots, 4 + 4 * len(present)
        vt = len(self.buf)
        offsets = [0] * nslots
        for k, slot in enumerate(present):
            offsets[slot] = 4 + 4 * k
        self.buf += struct.pack(f"<HH{nslots}H", vsize, tsize, *offsets)
        self._align()
        table = len(self.buf)
        self.buf += struct.pack("<i", table - vt) + b"\0" * (4 * len(present))
        return {"table": table, **{slot: table + 4 + 4 * k for k, slot in enumerate(present)}}

    def point(self, field: int, target: int) -> None:
        struct.pack_into("<I", self.buf, field, target - field)

    def vector_of(self, targets_later: int) -> tuple[int, list[int]]:
        """A vector of `targets_later` uoffsets (positions returned, to patch)."""
        self._align()
        start = len(self.buf)
        self.buf += struct.pack("<I", targets_later) + b"\0" * (4 * targets_later)
        return start, [start + 4 + 4 * i for i in range(targets_later)]

    def string(self, data: bytes) -> int:
        self._align()
        start = len(self.buf)
        self.buf += struct.pack("<I", len(data)) + data + b"\0"
        return start


def container(payload: bytes, metadata: bytes = b'{"version": "2.5.0"}') -> bytes:
    header = MAGIC + struct.pack("<QQ", 6, len(payload)) + b"\0" * 40
    return header + payload + struct.pack("<Q", len(metadata)) + metadata


def aliased(n: int) -> bytes:
    """One graph listed n times, whose tensor list names one tensor table n times: n*n decodes if unbounded."""
    p = Payload()
    root = p.table(3, [2])  # slot 2: graphs
    p.point(0, root["table"])
    start, fields = p.vector_of(n)
    p.point(root[2], start)
    graph = p.table(1, [0])  # slot 0: tensors
    for f in fields:
        p.point(f, graph["table"])
    tstart, tfields = p.vector_of(n)
    p.point(graph[0], tstart)
    tensor = p.table(1, [])
    for f in tfields:
        p.point(f, tensor["table"])
    return container(bytes(p.buf))


def with_string(slot: int, data: bytes) -> bytes:
    """One graph with no tensors, and a string in root `slot` (3: build_info, 12: input io JSON)."""
    p = Payload()
    root = p.table(max(slot, 2) + 1, sorted({2, slot}))
    p.point(0, root["table"])
    start, fields = p.vector_of(1)
    p.point(root[2], start)
    graph = p.table(1, [])
    p.point(fields[0], graph["table"])
    p.point(root[slot], p.string(data))
    return container(bytes(p.buf))


def minimal(metadata: object = None) -> bytes:
    p = Payload()
    root = p.table(3, [2])
    p.point(0, root["table"])
    start, fields = p.vector_of(1)
    p.point(root[2], start)
    graph = p.table(1, [])
    p.point(fields[0], graph["table"])
    meta = b'{"version": "2.5.0"}' if metadata is None else (metadata if isinstance(metadata, bytes) else json.dumps(metadata).encode())
    return container(bytes(p.buf), meta)
