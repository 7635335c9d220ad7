"""Store once what several virtual environments repeat: identical files become hard links to one copy.

    python scripts/link_duplicates.py DIR...

The side environments repeat hermes-nb's venv and each other: the CPU torch of .venv and .venvs/vllm is one wheel,
and numpy, pyarrow, sympy, transformers and their kind come in up to five copies (1.6 of the 11.2 GB the side
environments take without this, docs/benchmarks.md, "Disk of the test set-up"). scripts/side_env.sh runs this
after every build.

A file is linked only to one of the same size, mode, owner, filesystem and content (a BLAKE2 digest of the whole
file). Linking is atomic: the link is made beside the file and renamed over it, so a reader sees a whole file at
every moment. It is safe because nothing writes into an installed file in place: pip removes a file before it
installs another version, and Python writes byte-code by renaming. Left alone: files under ``MIN_SIZE`` (many, a
block each, little to gain) and ``.py`` sources (their byte-code records the source's mtime, which a link would
change, so every process would compile them again). Running it again links nothing new.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

# Below this a file is one or a few blocks: the venvs hold ~10^5 of them, worth ~1 % of the space.
MIN_SIZE = 64 * 1024


class FileKind(NamedTuple):
    """What two files must share, besides content, to be one file: a link has one size, mode and owner."""

    device: int
    size: int
    mode: int
    uid: int
    gid: int


class Saving(NamedTuple):
    files_linked: int
    bytes_saved: int


def linkable_files(roots: Iterable[Path]) -> Iterator[tuple[Path, os.stat_result]]:
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder, name)
                info = path.lstat()
                if stat.S_ISREG(info.st_mode) and info.st_size >= MIN_SIZE and path.suffix != ".py":
                    yield path, info


def files_by_kind(roots: Iterable[Path]) -> dict[FileKind, dict[int, list[Path]]]:
    """Each kind of file, then each of its inodes, with the paths that name it."""
    kinds: dict[FileKind, dict[int, list[Path]]] = defaultdict(lambda: defaultdict(list))
    for path, info in linkable_files(roots):
        kind = FileKind(info.st_dev, info.st_size, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
        kinds[kind][info.st_ino].append(path)
    return kinds


def digest(path: Path) -> bytes:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "blake2b").digest()


def replace_with_link(keeper: Path, path: Path) -> bool:
    staged = path.with_name(f".{path.name}.link-{os.getpid()}")
    try:
        os.link(keeper, staged)
        os.replace(staged, path)
    except OSError as error:
        staged.unlink(missing_ok=True)
        print(f"link_duplicates: kept {path} as it is ({error.strerror})", file=sys.stderr)
        return False
    return True


def link_one_kind(size: int, inodes: dict[int, list[Path]]) -> Saving:
    """Within files of one kind, every inode whose content an earlier one has becomes links to that one."""
    keepers: dict[bytes, Path] = {}
    files_linked = bytes_saved = 0
    for paths in inodes.values():
        keeper = keepers.setdefault(digest(paths[0]), paths[0])
        if keeper == paths[0]:
            continue
        linked = [path for path in paths if replace_with_link(keeper, path)]
        files_linked += len(linked)
        # The inode's blocks are freed only once no path names it any more.
        bytes_saved += size if len(linked) == len(paths) else 0
    return Saving(files_linked, bytes_saved)


def link_duplicates(roots: Iterable[Path]) -> Saving:
    files_linked = bytes_saved = 0
    for kind, inodes in files_by_kind(roots).items():
        if len(inodes) < 2:
            continue
        saving = link_one_kind(kind.size, inodes)
        files_linked += saving.files_linked
        bytes_saved += saving.bytes_saved
    return Saving(files_linked, bytes_saved)


def existing_folder(value: str) -> Path:
    path = Path(value)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is not a folder (give the virtual environments to link)")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=existing_folder, metavar="DIR")
    saving = link_duplicates(parser.parse_args().folders)
    print(f"link_duplicates: {saving.files_linked} files linked, {saving.bytes_saved / 2**20:.0f} MiB saved")


if __name__ == "__main__":
    main()
