"""The verifiers Python: the interpreter that reads a verifiers taskset's config and runs its episodes, checked.

``HERMES_NB_VERIFIERS_PYTHON`` names it (verifiers pins openai<3 and mcp==2.0.0, which OpenEnv's pins exclude, so it
lives in a venv of its own, ``scripts/side_envs/verifiers.txt``); unset, hermes-nb's own interpreter. It must import
``verifiers``, ``renderers`` (its train client's tokenizer) and ``tokenizers``; a run with verifiers' own ``null``
harness must also find ``uv`` beside it or on PATH (verifiers runs that harness's program with ``uv``; the default
``hermes_nb_chat`` plays the episodes in-process). The check and its one-line refusal are
``system.side_python``'s.
"""

from __future__ import annotations

import os
from pathlib import Path

from hermes_nb.system.side_python import SidePython, modules_probe

VERIFIERS_PYTHON_VAR = "HERMES_NB_VERIFIERS_PYTHON"
UV = "uv"
# "uv" joins the missing when no uv is beside the interpreter or on PATH.
FIND_UV = (
    "here = os.path.dirname(sys.executable); "
    "missing += [] if shutil.which('uv', path=os.pathsep.join([here, os.environ.get('PATH', '')])) else ['uv']"
)
VERIFIERS = SidePython(
    framework="verifiers",
    variable=VERIFIERS_PYTHON_VAR,
    install_command=(
        "python3 -m venv ~/.venvs/verifiers && ~/.venvs/verifiers/bin/pip install verifiers==0.4.0 tokenizers uv"
    ),
    venv_python="~/.venvs/verifiers/bin/python",
    probe_source=modules_probe(("verifiers", "renderers", "tokenizers"), extra=FIND_UV),
    lacks="cannot import or find",
)


def verifiers_python(file: str, *, needs_uv: bool = False) -> str:
    """The verifiers Python, checked to import what a verifiers run needs (and to find ``uv``, when it does)."""
    return VERIFIERS.checked(file, not_needed=() if needs_uv else (UV,))


def process_path(python: str, base: str) -> str:
    """PATH for the processes of a verifiers run: the interpreter's folder first, so verifiers finds the ``uv``
    installed beside it (it would otherwise install one into the user's home)."""
    return os.pathsep.join(p for p in (str(Path(python).parent), base) if p)
