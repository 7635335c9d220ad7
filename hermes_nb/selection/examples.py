"""``hermes-nb examples DIR``: the shipped example notebooks, copied out for a user to run and change.

The notebooks ship inside the package (``hermes_nb.system.home.shipped_notebooks_dir``), where an installed wheel
keeps them read-only in spirit: a user runs a copy of their own.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from hermes_nb.errors import HermesNBError
from hermes_nb.results import Result
from hermes_nb.system import home


class ExamplesCopied(Result):
    directory: str
    notebooks: list[str]  # file names, as copied into ``directory``

    def _text_lines(self) -> list[str]:
        return [f"{len(self.notebooks)} example notebook(s) in {self.directory}:", *(f"  {n}" for n in self.notebooks)]


async def copy_examples(directory: str | Path) -> ExamplesCopied:
    """Copy the example notebooks into ``directory`` (made if missing); a notebook already there is not overwritten:
    then nothing is copied."""
    return await asyncio.to_thread(_copy_examples, Path(directory).expanduser())


def _copy_examples(target: Path) -> ExamplesCopied:
    sources = sorted(home.shipped_notebooks_dir().glob("*.ipynb"))
    if target.exists() and not target.is_dir():
        raise HermesNBError(f"{target} is a file; give a directory to copy the notebooks into")
    taken = [source.name for source in sources if (target / source.name).exists()]
    if taken:
        raise HermesNBError(f"{target} already has {', '.join(taken)}; give an empty or new directory")
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        shutil.copyfile(source, target / source.name)
    return ExamplesCopied(directory=str(target), notebooks=[source.name for source in sources])
