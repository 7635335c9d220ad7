"""A run's secret on disk, and the private folders that hold it.

The secret (``hermes_nb.protocol.auth`` says what it guards) lives in ``<run>/secret`` (mode 0600) inside a run
directory of mode 0700, under a home, ``runs/`` and ``logs/`` of mode 0700: another local user can neither read
it nor list what the run holds. Every secret read in this process is remembered, so that ``redact`` hides it
wherever it is shown (a status that hands out a working URL, an error text).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.auth import secret_from_env
from hermes_nb.protocol.redaction import without_secrets
from hermes_nb.protocol.run_files import RUN_SECRET_FILE
from hermes_nb.system import home

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# 32 random bytes: 256 bits, far beyond guessing over loopback; token_urlsafe keeps it usable in a URL path.
SECRET_BYTES = 32

_seen: set[str] = set()


def private_dir(path: Path) -> Path:
    """``path`` created if missing and made 0700 (an existing home made under a looser umask is tightened)."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def private_home() -> None:
    """The home and its ``runs/`` and ``logs/`` folders, 0700."""
    for path in (home.home_dir(), home.runs_dir(), home.logs_dir()):
        private_dir(path)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte (never readable by others, even briefly)."""
    pending = path.with_name(f".{path.name}.tmp")
    pending.unlink(missing_ok=True)
    fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    pending.replace(path)


def create_run_secret(run_dir: Path) -> str:
    """A new secret for the run in ``run_dir``, written to its secret file."""
    secret = secrets.token_urlsafe(SECRET_BYTES)
    write_private(run_dir / RUN_SECRET_FILE, secret)
    _seen.add(secret)
    return secret


def read_run_secret(run_dir: Path) -> str | None:
    """The run's secret; ``None`` for a run made before runs had one."""
    path = run_dir / RUN_SECRET_FILE
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HermesNBError(f"{path}: cannot read the run's secret ({exc.strerror})") from None
    if secret:
        _seen.add(secret)
    return secret or None


def seen_secrets() -> list[str]:
    """Every run secret this process has made or read, for redaction."""
    return sorted(_seen)


def redact(value: Any) -> Any:
    """``value`` with every known key's value and every run secret this process knows hidden (strings inside
    dicts and lists too): what every result, error text and saved config passes through before it is shown."""
    run_secret = secret_from_env()
    return without_secrets(value, [*home.secret_values(), *seen_secrets(), *([run_secret] if run_secret else [])])
