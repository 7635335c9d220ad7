"""Writing a run's files on a disk that may fill up: the cause is named, and no half record is left behind.

A full disk (``ENOSPC``), an exhausted quota (``EDQUOT``) and a file size limit (``EFBIG``, ``RLIMIT_FSIZE``;
Python ignores ``SIGXFSZ``, so the write fails instead of the process dying) all end a write the same way:
``DiskFullError``, whose one line is ``disk full (ENOSPC) while writing <file>``. The run's processes raise it,
the trainer exits with ``DISK_FULL_EXIT``, and the supervisor copies that line into the run's error.

Append-only record files (``metrics.jsonl``, ``checkpoints.jsonl``, ``trajectories.jsonl.gz``) are written
through ``RecordFile``: each record is appended by one writer, and an append that fails is cut back off, so the
file stays a sequence of whole records that the next append (once space is back) continues.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path
from types import TracebackType

from hermes_nb.errors import HermesNBError

# The errno of each way a write runs out of room, as the message names it.
DISK_FULL_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "ENOSPC",
    errno.EDQUOT: "EDQUOT: quota exceeded",
    errno.EFBIG: "EFBIG: file size limit",
}
# How libraries that report an I/O error as text word them: safetensors (Rust) says "... (os error 28)".
_ERRNO_TEXTS: dict[int, tuple[str, ...]] = {
    errno.ENOSPC: ("no space left on device", "os error 28"),
    errno.EDQUOT: ("disk quota exceeded", "os error 122"),
    errno.EFBIG: ("file too large", "os error 27"),
}
# torch.save reports a failed write without its errno ("unexpected pos ..."). A write fails for lack of room only
# once the filesystem is down to its last blocks (writers fill what is left first), so a failed write that finds
# less than this free was a full disk; 1 MiB is far below any space worth writing into and far above a block.
NEARLY_FULL_BYTES = 1 << 20
# sysexits.h EX_IOERR: the exit status of a run's process that stopped on a full disk, so the supervisor can name
# the cause even when the process's log, on the same full disk, could not take its last line.
DISK_FULL_EXIT = 74
# The one line of a DiskFullError, as the supervisor finds it in a log tail.
DISK_FULL_LINE = re.compile(r"disk full \((E[A-Z]+)[^)]*\) while writing .+$")


class DiskFullError(HermesNBError):
    """A write of ``target`` failed because the disk (or a quota, or a file size limit) had no more room."""

    def __init__(self, code: int, target: str | Path) -> None:
        self.errno = code
        self.target = str(target)
        name = DISK_FULL_ERRNOS.get(code) or errno.errorcode.get(code, str(code))
        super().__init__(f"disk full ({name}) while writing {target}")


def disk_full_errno(exc: BaseException, directory: str | Path | None = None) -> int | None:
    """The errno if ``exc`` (or an exception it was raised from) is a write that ran out of room, else None.

    ``directory``: where the failed write went; when the error does not say why, a filesystem found (nearly)
    full there means it was the lack of room. Ask before cleaning up: removing the partial write frees space.
    """
    for link in _chain(exc):
        if isinstance(link, DiskFullError):
            return link.errno
        if isinstance(link, OSError) and link.errno in DISK_FULL_ERRNOS:
            return link.errno
        text = str(link).lower()
        for code, phrases in _ERRNO_TEXTS.items():
            if any(phrase in text for phrase in phrases):
                return code
    if directory is not None and free_bytes(directory) < NEARLY_FULL_BYTES:
        return errno.ENOSPC
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in seen:
        seen.append(link)
        link = link.__cause__ or link.__context__
    return seen


def free_bytes(directory: str | Path) -> int:
    """Bytes an unprivileged writer may still use under ``directory`` (huge when it cannot be told)."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return 1 << 62
    return stats.f_bavail * stats.f_frsize


def disk_full_line(lines: list[str]) -> str | None:
    """The last ``disk full (...) while writing ...`` message in ``lines`` (a log tail), if any."""
    for line in reversed(lines):
        found = DISK_FULL_LINE.search(line)
        if found:
            return found.group(0)
    return None


def disk_full_cause(exit_code: int | None, log_tail: list[str]) -> str | None:
    """Why a run's process ended, if it was a full disk: its ``DiskFullError`` line from the log tail, or, when
    the log (on the same disk) could not take it, what ``DISK_FULL_EXIT`` alone tells."""
    line = disk_full_line(log_tail)
    if line is not None:
        return line
    if exit_code == DISK_FULL_EXIT:
        return "disk full while writing one of the run's files (the log, on the same disk, could not say which)"
    return None


class RecordFile:
    """An append-only file of whole records (JSON lines, gzip members), one writer at a time.

    Each ``append`` goes to the end (``O_APPEND``) unbuffered; if it fails part-way, the file is cut back to
    where it ended before, so readers never find half a record before a whole one. ``line_records``: records
    end in ``\\n``, and a torn last line found on opening (a writer killed mid-write) is cut off first, so the
    next record does not fuse with it into one unreadable line.
    """

    def __init__(self, path: str | Path, *, line_records: bool = True) -> None:
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        if line_records:
            self._cut_torn_line()

    @property
    def closed(self) -> bool:
        return self._fd is None

    def append(self, record: bytes) -> None:
        """Write ``record`` whole, or raise (``DiskFullError`` when out of room) with the file as it was."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        start = os.fstat(self._fd).st_size
        view = memoryview(record)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            with contextlib.suppress(OSError):  # shrinking needs no room; if even it fails, readers skip the tail
                os.ftruncate(self._fd, start)
            code = disk_full_errno(exc)
            if code is None:
                raise
            raise DiskFullError(code, self.path) from exc

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _cut_torn_line(self) -> None:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == 0 or os.pread(self._fd, 1, size - 1) == b"\n":
            return
        end = size
        while end > 0:  # back to the newline that ends the last whole line (or the start of the file)
            start = max(0, end - 8192)
            cut = os.pread(self._fd, end - start, start).rfind(b"\n")
            if cut >= 0:
                os.ftruncate(self._fd, start + cut + 1)
                return
            end = start
        os.ftruncate(self._fd, 0)

    def __enter__(self) -> RecordFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def append_record(path: str | Path, record: bytes, *, line_records: bool = True) -> None:
    """Open, append one whole record (see ``RecordFile``), close."""
    with RecordFile(path, line_records=line_records) as file:
        file.append(record)


class Reserve:
    """A small file of zeros that makes room when the disk is full, so that a run's failure can be recorded.

    A run keeps one in its directory while it is live. When writing ``run.json`` fails for lack of room, the
    reserve is deleted and the write tried again: the error that says "disk full" must itself reach the disk.
    """

    # run.json is a few KB; this covers it many times over, and the log lines written beside it.
    SIZE = 256 * 1024

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def ensure(self) -> None:
        """Create the reserve unless it exists; quietly do without one when there is no room for it."""
        if self.path.exists():
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        try:
            os.posix_fallocate(fd, 0, self.SIZE)
        except OSError:
            os.close(fd)
            self.release()
            return
        os.close(fd)

    def release(self) -> bool:
        """Delete the reserve; True when there was one to free."""
        try:
            self.path.unlink()
        except OSError:
            return False
        return True
