"""Turning a request body into a validated model, with limits: size, gzip, strict JSON, one-line errors.

atroposlib environments gzip bodies of 1 KiB and more (``Content-Encoding: gzip``), so the size limit applies
to the decompressed body too: a small compressed body must not expand into gigabytes. Non-finite numbers
(``NaN``, ``Infinity``, ``1e999``) are refused here, because one in a queued group would poison a training
step and make the ``/batch`` response unserialisable.
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from hermes_nb.trajectory_api.state import RequestRejected

T = TypeVar("T")

# zlib's window-bits value that accepts a gzip header and trailer.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
# How many validation errors one message lists; the rest are counted.
_ERRORS_SHOWN = 3


def too_large(size: int, limit: int) -> RequestRejected:
    return RequestRejected(413, f"body: {size} bytes, over this API's limit of {limit} bytes (--max-body-mb)")


def decode(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """The body as sent before compression; ``identity`` and ``gzip`` are accepted."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise RequestRejected(415, f"Content-Encoding: {content_encoding!r} is not supported; use gzip or none")
    inflater = zlib.decompressobj(_GZIP_WBITS)
    try:
        # Ask for one byte more than allowed: getting it proves the body is too large without inflating it all.
        plain = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise RequestRejected(400, f"body: invalid gzip data ({exc})") from None
    if len(plain) > limit:
        raise RequestRejected(413, f"body: decompresses to more than this API's limit of {limit} bytes")
    if not inflater.eof:
        raise RequestRejected(400, "body: truncated gzip data")
    return plain


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a 64-bit float")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(raw: bytes) -> Any:
    if not raw.strip():
        raise RequestRejected(400, "body: empty; expected a JSON document")
    try:
        return json.loads(raw, parse_float=_finite_float, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        # json.JSONDecodeError and UnicodeDecodeError are ValueErrors; absurd nesting is a RecursionError.
        raise RequestRejected(400, f"body: not valid JSON ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def validate(adapter: TypeAdapter[T], data: Any, root: str = "") -> T:
    """``adapter`` applied to ``data``; on failure a 422 naming the field, under ``root`` (e.g. the list)."""
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise RequestRejected(422, describe(exc, root)) from None


def describe(exc: ValidationError, root: str = "") -> str:
    """``tokens[0][2]: Input should be a valid integer; masks: Field required`` from pydantic's errors."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = [_one_error(e["loc"], e["msg"], e["type"], root) for e in errors[:_ERRORS_SHOWN]]
    if len(errors) > _ERRORS_SHOWN:
        parts.append(f"and {len(errors) - _ERRORS_SHOWN} more errors")
    return "; ".join(parts)


def _one_error(loc: tuple[int | str, ...], msg: str, kind: str, root: str) -> str:
    where = root
    for part in loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    if kind == "value_error":
        # Our model validators already name the field; pydantic prefixes them with "Value error, ".
        msg = msg.removeprefix("Value error, ")
    elif not where:
        where = "body"  # the whole document has the wrong shape, e.g. a list where an object belongs
    return f"{where}: {msg}" if where else msg
