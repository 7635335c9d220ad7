"""A small real filesystem (tmpfs) for tests of a full disk, mounted where a test needs it and unmounted after.

Mounting needs root (CAP_SYS_ADMIN). Outside CI a test that cannot mount skips, naming why; in CI (``ci.in_ci``,
where the suite runs as root) it fails, so a runner that lost the privilege cannot hide these tests. A tmpfs
counts whole pages, and a write that finds none free fails with ENOSPC exactly as a full disk does.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ci import skip_or_fail

# A filler is written in chunks this size first, then byte by byte, so it takes every last free byte.
_FILL_CHUNK = 1 << 16


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount -o size=``, e.g. ``512k``) mounted on ``where`` for the block."""
    where.mkdir(parents=True, exist_ok=True)
    reason = _mount(where, size)
    if reason is not None:
        skip_or_fail(f"a full-disk test needs a tmpfs (root, CAP_SYS_ADMIN) on {where}: {reason}")
    try:
        yield where
    finally:
        _unmount(where)


def _mount(where: Path, size: str) -> str | None:
    if shutil.which("mount") is None:
        return "no mount command"
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return f"mount failed (needs root): {result.stderr.strip() or result.returncode}"
    return None


def _unmount(where: Path) -> None:
    for _ in range(50):  # a process of the test may still be closing a file there
        if subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def resize(where: Path, size: str) -> None:
    """Give the tmpfs on ``where`` a new size (its files stay): space comes back."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], capture_output=True, check=True)


def fill(directory: Path) -> Path:
    """Take every free byte of the filesystem under ``directory`` with one file; returns it (delete it to free)."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as handle:
        for chunk in (_FILL_CHUNK, 1):
            try:
                while True:
                    handle.write(b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return filler
