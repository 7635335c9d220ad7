"""The checks before a run on Tinker starts (``tinker_calls.check_config``), in a child process.

``check_before_start(config)`` runs ``python -m hermes_nb.tinker.preflight`` with the run's config on
stdin and waits for one line: nothing (fine) or the error. The tinker SDK keeps an event-loop thread, connection
pools and a session heartbeat for as long as its client lives; in a child they end with it, instead of living on in
the notebook kernel that called ``rl_start_training``. The key reaches the child in its environment, never in argv.
"""

from __future__ import annotations

import subprocess
import sys

from hermes_nb.config import RunConfig
from hermes_nb.errors import TinkerError
from hermes_nb.tinker.calls import PREFLIGHT_TIMEOUT_S

# Starting Python and importing the SDK and transformers (the tokenizer check) takes a few seconds on a busy machine.
CHILD_OVERHEAD_S = 30.0


def check_before_start(config: RunConfig) -> None:
    """Raise ``TinkerError`` with the child's one line when the key, the server or the base model is unusable."""
    timeout = min(config.tinker.give_up_after_s, PREFLIGHT_TIMEOUT_S) + CHILD_OVERHEAD_S
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hermes_nb.tinker.preflight"],
            input=config.to_yaml(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise TinkerError(f"the Tinker checks before the run took over {timeout:.0f} s; is the server up?") from None
    if done.returncode == 0:
        return
    lines = done.stdout.strip().splitlines() or done.stderr.strip().splitlines()[-1:] or ["no output"]
    raise TinkerError(lines[-1])


def main() -> int:
    try:
        from hermes_nb.tinker.calls import check_config

        check_config(RunConfig.from_yaml_text(sys.stdin.read(), source="<stdin>"))
    except Exception as exc:  # one line for the parent, whatever it was
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
