"""The OpenEnv Python: the interpreter that serves an OpenEnv environment and runs its episodes, checked first.

``HERMES_NB_OPENENV_PYTHON`` names it (OpenEnv's pins, openai 3 and fastmcp among them, live in a venv of their own,
``scripts/side_envs/openenv.txt``); unset, hermes-nb's own interpreter. It must import ``openenv`` (the server),
``websockets`` (the session) and ``tokenizers`` (the chat template the episodes render); the check and its one-line
refusal are ``system.side_python``'s.
"""

from __future__ import annotations

from hermes_nb.system.side_python import SidePython, modules_probe

OPENENV_PYTHON_VAR = "HERMES_NB_OPENENV_PYTHON"
OPENENV = SidePython(
    framework="OpenEnv",
    variable=OPENENV_PYTHON_VAR,
    install_command="python3 -m venv ~/.venvs/openenv && ~/.venvs/openenv/bin/pip install openenv==0.10.0 tokenizers",
    venv_python="~/.venvs/openenv/bin/python",
    probe_source=modules_probe(("openenv", "websockets", "tokenizers")),
)
