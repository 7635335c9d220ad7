"""verifiers' ``null`` harness's chat program, prepared ahead of the first episode (in the verifiers Python).

The harness runs its chat program (a PEP 723 script needing openai, mcp, httpx...) under ``uv``, which on first use
downloads those packages into uv's cache and builds the script's environment. ``prepare()`` does that work through
the harness's own ``setup`` on verifiers' subprocess runtime, as an episode would: the side venv's build runs it
(``python -m hermes_nb.frameworks.verifiers.chat_program``, the ``# post:`` line of
``scripts/side_envs/verifiers.txt``), so a run finds the packages cached, and a run's environment process runs it
in ``setup``, so a missing ``uv`` or a download that fails is one error before any episode starts, never a failed
episode per group. Later episodes of the process reuse the prepared program (verifiers keeps it per process).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from hermes_nb.errors import HermesNBError

# uv resolves and installs the chat program's packages: a minute or two from an empty cache on a slow link; well
# under a second once they are cached. Past this, the index or the network is unreachable.
PREPARE_TIMEOUT_S = 300.0
# The harness whose program is prepared: verifiers' own chat harness, a run's episodes' with `env.harness: null`.
HARNESS_ID = "null"
SIDE_ENV_COMMAND = "sh scripts/side_env.sh verifiers"


class ChatProgramError(HermesNBError):
    """verifiers' chat program could not be prepared: no ``uv``, or uv could not install its packages."""


def uv_path() -> str | None:
    """The ``uv`` verifiers would run: beside this interpreter (the side venv's) or on PATH."""
    here = str(Path(sys.executable).parent)
    return shutil.which("uv", path=os.pathsep.join([here, os.environ.get("PATH", "")]))


async def prepare() -> None:
    """Prepare the chat program as the harness's first episode would; ``ChatProgramError`` naming the cause."""
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import SubprocessConfig, provision_runtime

    if uv_path() is None:
        # Checked first: without uv on PATH, verifiers would try to install one (pip, then a download).
        raise ChatProgramError(
            f"verifiers runs its {HARNESS_ID} harness's chat program with uv, and no uv is beside {sys.executable} "
            f"or on PATH: pip install uv in that environment ({SIDE_ENV_COMMAND} does)"
        )
    config = vf.harness_config_type(HARNESS_ID)()
    harness = vf.load_harness(config)
    try:
        async with asyncio.timeout(PREPARE_TIMEOUT_S), provision_runtime(SubprocessConfig()) as runtime:
            await harness.setup(runtime)
    except TimeoutError:
        raise ChatProgramError(
            f"uv did not install verifiers' chat program's packages within {PREPARE_TIMEOUT_S:g} s: is the package "
            f"index reachable? ({SIDE_ENV_COMMAND} installs them ahead, into uv's cache)"
        ) from None
    except RuntimeError as exc:  # verifiers' "failed to prepare uv script: <uv's stderr>"
        raise ChatProgramError(
            f"uv could not prepare verifiers' chat program: {exc} ({SIDE_ENV_COMMAND} installs its packages "
            "ahead, into uv's cache)"
        ) from None


if __name__ == "__main__":
    try:
        asyncio.run(prepare())
    except ChatProgramError as exc:
        sys.exit(f"chat_program: {exc}")
    print(f"chat_program: verifiers' {HARNESS_ID} harness's chat program is prepared")
