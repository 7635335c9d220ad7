"""The disk the test set-up takes: every side environment built from scratch into a new folder, as `make test` does.

    .venv/bin/python bench/setup_disk.py [--into DIR]

Runs ``make side-envs`` with ``SIDE_ENVS_DIR`` set to a new folder (``--into``, default ``bench-side-envs`` in the
repository, removed after unless ``--keep``), sampling the filesystem's used space every ``SAMPLE_SECONDS``. Prints
the most used at once and what is left at the end, both above the level before the build, and each environment's
own share (a file hard-linked to ``.venv`` or to an environment built before is counted there, once). Nothing
else should write to this filesystem meanwhile: the figures are of the whole filesystem. Needs ``make setup``
first (``.venv`` is what the side environments link to).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# pip's installs take minutes; a 1 s sample misses no peak that lasts as long as one package's install.
SAMPLE_SECONDS = 1.0
GB = 1e9


def used_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).used


def sample_peak(folder: Path, stop: threading.Event, peak: list[int]) -> None:
    while not stop.wait(SAMPLE_SECONDS):
        peak[0] = max(peak[0], used_bytes(folder))


def own_bytes(folders: list[Path]) -> dict[Path, int]:
    """Allocated bytes of each folder, an inode counted only in the first folder that holds it."""
    seen: set[tuple[int, int]] = set()
    sizes = dict.fromkeys(folders, 0)
    for folder in folders:
        for parent, _, names in os.walk(folder):
            for name in names:
                info = os.lstat(os.path.join(parent, name))
                if (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    sizes[folder] += info.st_blocks * 512
    return sizes


def build(into: Path) -> tuple[float, int, int]:
    """Seconds, peak bytes above the start, final bytes above the start."""
    start = used_bytes(REPO)
    peak, stop = [start], threading.Event()
    sampler = threading.Thread(target=sample_peak, args=(REPO, stop, peak), daemon=True)
    began = time.monotonic()
    sampler.start()
    try:
        environment = {**os.environ, "SIDE_ENVS_DIR": str(into)}
        subprocess.run(["make", "side-envs"], cwd=REPO, env=environment, check=True)
    finally:
        stop.set()
        sampler.join()
    return time.monotonic() - began, peak[0] - start, used_bytes(REPO) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", type=Path, default=REPO / "bench-side-envs")
    parser.add_argument("--keep", action="store_true", help="leave the built environments in --into")
    args = parser.parse_args()
    into = args.into.resolve()
    if into.exists():
        parser.error(f"--into {into} exists: give a folder that does not, so every environment is built anew")
    if not (REPO / ".venv").is_dir():
        parser.error("no .venv: run `make setup` first (the side environments link to its files)")
    try:
        seconds, peak, final = build(into)
        built = sorted((path for path in into.iterdir() if path.is_dir()), key=lambda path: path.stat().st_mtime)
        shares = own_bytes([REPO / ".venv", *built])
    finally:
        if not args.keep:
            shutil.rmtree(into, ignore_errors=True)
    print(f"built in {seconds:.0f} s; disk above the start: at most {peak / GB:.1f} GB, at the end {final / GB:.1f} GB")
    for folder, size in shares.items():
        print(f"  {folder.name:<14} {size / GB:5.2f} GB")


if __name__ == "__main__":
    main()
