"""How long the processes of a run get to end, and so how long stopping a run may take.

The supervisor waits these graces; ``rl_stop_training`` waits for the supervisor. Both read them from here, so
a longer grace cannot make a stop give up while the supervisor is still within it. Read them as module
attributes (``graces.TRAINER_STOP_GRACE``), so a value changed at run time reaches both.
"""

from __future__ import annotations

# The trainer saves a final checkpoint on SIGTERM; a tiny model takes well under a second, a big one longer.
TRAINER_STOP_GRACE = 120.0
PEER_STOP_GRACE = 10.0
# A stop request is seen at the supervisor's next poll, which can sit behind two health requests of 1 s each.
STOP_NOTICE_SECONDS = 5.0


def shut_down_seconds(grace_seconds: float) -> float:
    """The longest ``Supervisor.shut_down`` takes: the run's process groups get one grace, and the processes
    outside them (W&B's service) one to end after SIGTERM and one more after SIGKILL."""
    return 3 * grace_seconds


def supervisor_stop_seconds() -> float:
    """The longest ``Supervisor.stop`` takes: the trainer's grace for its final checkpoint, then a shut-down."""
    return TRAINER_STOP_GRACE + shut_down_seconds(PEER_STOP_GRACE)


def stop_wait_seconds() -> float:
    """How long a stop waits for the run's terminal state: the supervisor may first have to notice the request
    and finish ending a start-up attempt whose port was taken (one shut-down) before it stops the run."""
    return STOP_NOTICE_SECONDS + shut_down_seconds(PEER_STOP_GRACE) + supervisor_stop_seconds()
