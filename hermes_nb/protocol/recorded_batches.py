"""``trajectories.jsonl.gz``: the batches a run trained on, one gzip member per step.

Each member is one JSON line, ``{"step": N, "groups": [ScoredDataGroup, ...]}``, the groups as the trainer used them
(with the per-token ``advantages`` it trained with). Members are appended whole (``hermes_nb.trainer.run.checkpoints``
writes them); a reader skips a truncated last member, which is what a crash mid-write leaves. Read by the rollout
viewer, replay (transfer) and the damage check of a run that ended.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from hermes_nb.protocol.trajectory import ScoredDataGroup

# The gzip magic and deflate method that start every member (RFC 1952).
_GZIP_MEMBER_START = b"\x1f\x8b\x08"
# How much of the end of trajectories.jsonl.gz a tail check reads: one step's batch compresses to far less for
# any batch that trains on one machine; a longer last member is left unchecked rather than read whole.
TAIL_CHECK_BYTES = 8 << 20
# The first window: a step of the shipped environments compresses to a few KB.
_FIRST_TAIL_WINDOW = 64 << 10
# How every member's text begins (encode_batch): what tells a member's start from bytes that only look like one.
_RECORD_START = b'{"step": '


def encode_batch(step: int, batch: list[ScoredDataGroup]) -> bytes:
    """The gzip member that records ``batch`` as the batch of ``step``."""
    # Serialised by pydantic (every token of a step, on the trainer's critical path); the same JSON as
    # json.dumps of the dumped groups, without its spaces inside them.
    groups = b",".join(g.model_dump_json(exclude_none=True).encode("utf-8") for g in batch)
    return gzip.compress(_RECORD_START + str(int(step)).encode("ascii") + b', "groups": [' + groups + b"]}\n")


def read_trajectories(path: Path) -> Iterator[tuple[int, list[ScoredDataGroup]]]:
    """Yield ``(step, groups)`` per recorded step; stops quietly at a truncated or corrupt tail."""
    data = path.read_bytes()
    while data:
        member = _whole_member(data)
        if member is None:
            return
        text, data = member
        for line in text.decode("utf-8").splitlines():
            row = json.loads(line)
            yield int(row["step"]), [ScoredDataGroup.model_validate(g) for g in row["groups"]]


def _whole_member(data: bytes) -> tuple[bytes, bytes] | None:
    """The text of the gzip member ``data`` starts with and the bytes after it; None if it is cut short or
    corrupt."""
    decompressor = zlib.decompressobj(wbits=31)  # 31 = gzip header, one member per object
    try:
        text = decompressor.decompress(data)
    except zlib.error:
        return None
    if not decompressor.eof:
        return None
    return text, decompressor.unused_data


TailState = Literal["whole", "truncated", "unchecked"]


def trajectories_tail(path: Path) -> TailState:
    """Whether ``trajectories.jsonl.gz`` ends with a whole member, read from its end only (status polls it).

    The last member starts at the last gzip header in the file from which a step's record decodes to the end of
    the file; a header sequence inside compressed data (odds 2^-24 per byte) does not decode to a record and is
    passed over. The window read from the end doubles until it holds the last member's start, up to
    ``TAIL_CHECK_BYTES``. A missing or empty file is whole.
    """
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            window = min(size, _FIRST_TAIL_WINDOW)
            while True:
                handle.seek(size - window)
                verdict = _last_member(handle.read(window))
                if verdict is not None:
                    return verdict
                if window == size:
                    return "truncated" if size else "whole"  # no record starts anywhere in the file
                if window >= TAIL_CHECK_BYTES:
                    return "unchecked"
                window = min(size, 2 * window)
    except FileNotFoundError:
        return "whole"


def _last_member(data: bytes) -> TailState | None:
    """The state of the last member starting in ``data`` (which runs to the end of the file); None if none does."""
    position = len(data)
    while (position := data.rfind(_GZIP_MEMBER_START, 0, position)) >= 0:
        verdict = _member_to_end(data[position:])
        if verdict is not None:
            return verdict
    return None


def _member_to_end(data: bytes) -> TailState | None:
    """``whole`` if ``data`` is exactly one member holding a step's record, ``truncated`` if it is the start of
    one, None if it is neither (a header sequence that happens to occur inside compressed bytes)."""
    decompressor = zlib.decompressobj(wbits=31)
    try:
        text = decompressor.decompress(data)
    except zlib.error:
        return None
    if not (text.startswith(_RECORD_START) or _RECORD_START.startswith(text)):
        return None
    if not decompressor.eof:
        return "truncated"
    return "whole" if not decompressor.unused_data else None
