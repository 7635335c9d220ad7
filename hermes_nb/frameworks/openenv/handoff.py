"""What the adapter hands an OpenEnv run's environment process, named once for both sides: the process's
environment class (by file and name, so that the kernel never imports the episode code, its WebSocket client or
httpx) and the variables that say which file's server it starts and where that server logs."""

from __future__ import annotations

from pathlib import Path

EPISODE_ENV_FILE = Path(__file__).resolve().with_name("episode_env.py")
EPISODE_ENV_CLASS = "OpenEnvAgentEnv"
EPISODE_ENV_SPEC = f"{EPISODE_ENV_FILE}:{EPISODE_ENV_CLASS}"
FILE_VAR = "HERMES_NB_OPENENV_FILE"  # the environment file whose app the process serves
LOG_VAR = "HERMES_NB_OPENENV_LOG"  # where that server logs
