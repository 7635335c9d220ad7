"""The run supervisor: one detached process per run that starts, watches and ends the run's three processes.

It owns ``run.json``: it is the only writer while it lives. Start-up waits on health checks, never on fixed
sleeps; every wait has a timeout; every outcome is a typed value that the caller handles. SIGTERM asks it to
stop the run gracefully (the trainer saves a final checkpoint first).

    python -m hermes_nb.runs.supervisor RUN_ID
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import psutil

from hermes_nb.config import RunConfig
from hermes_nb.logtail import tail_lines
from hermes_nb.net import LOOPBACK
from hermes_nb.runs import processes
from hermes_nb.runs.layout import RunPaths
from hermes_nb.runs.outcomes import Launched, LaunchFailed, LaunchOutcome, StopRequested
from hermes_nb.runs.state import ProcessRecord, RunState, read_run_state, write_run_state

log = logging.getLogger("hermes_nb.supervisor")

# Generous for a cold disk cache on two cores; a healthy start takes a few seconds (bench/startup.py).
API_START_TIMEOUT = 60.0
TRAINER_START_TIMEOUT = 240.0
ENV_START_TIMEOUT = 90.0
POLL_SECONDS = 0.05
MONITOR_SECONDS = 0.1
# The trainer saves a final checkpoint on SIGTERM; a tiny model takes well under a second, a big one longer.
TRAINER_STOP_GRACE = 120.0
PEER_STOP_GRACE = 10.0
# After the trainer completes, the environment runs its final evaluation and exits by itself.
ENV_FINISH_GRACE = 60.0
LOG_TAIL_LINES = 20


@dataclass
class Child:
    record: ProcessRecord
    popen: subprocess.Popen[bytes]

    def exit_code(self) -> int | None:
        return self.popen.poll()


@dataclass
class Supervisor:
    paths: RunPaths
    config: RunConfig
    state: RunState
    children: dict[str, Child] = field(default_factory=dict)
    stop_requested: bool = False
    seen_descendants: dict[int, psutil.Process] = field(default_factory=dict)

    # ---- state -------------------------------------------------------------------------------------------
    def save(self) -> None:
        write_run_state(self.paths.run_dir, self.state)

    def set_status(self, status: str, **changes: object) -> None:
        self.state = self.state.model_copy(update={"status": status, **changes})
        self.save()
        log.info("status -> %s", status)

    def on_sigterm(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    # ---- launching ---------------------------------------------------------------------------------------
    def launch(self, name: str, argv: list[str]) -> Child:
        popen, record = processes.spawn(name, argv, self.paths.logs[name], env=child_environment())
        child = Child(record=record, popen=popen)
        self.children[name] = child
        self.state.processes[name] = record
        self.save()
        log.info("started %s pid %d: %s", name, popen.pid, " ".join(argv))
        return child

    def wait_until(self, name: str, ready: Callable[[], bool], timeout: float, what: str) -> LaunchOutcome:
        """Poll ``ready`` until true; fail early when any child dies or a stop is requested."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stop_requested:
                return StopRequested()
            dead = self.first_dead_child()
            if dead is not None:
                return self.failure(dead, f"during start-up, while waiting for {what}")
            if ready():
                return Launched()
            time.sleep(POLL_SECONDS)
        return self.failure(name, f"timed out after {timeout:.0f} s waiting for {what}")

    def failure(self, name: str, cause: str) -> LaunchFailed:
        child = self.children.get(name)
        code = child.exit_code() if child else None
        if code is not None:
            cause = f"{processes.describe_exit(code)} {cause}"
        log_path = self.paths.logs[name]
        tail = tail_lines(log_path, LOG_TAIL_LINES)
        return LaunchFailed(process=name, cause=cause, log_path=str(log_path), log_tail=tail)

    def first_dead_child(self) -> str | None:
        for name, child in self.children.items():
            if child.exit_code() is not None:
                return name
        return None

    def argv_for(self, name: str) -> list[str]:
        infra, config_path = self.config.infra, str(self.paths.config)
        env_ref = self.config.environment
        assert env_ref is not None  # the launcher refuses to start without one
        return {
            "api": [
                sys.executable,
                "-m",
                "hermes_nb.trajectory_api",
                "--host",
                LOOPBACK,
                "--port",
                str(infra.api_port),
            ],
            "trainer": [sys.executable, "-m", "hermes_nb.trainer", "--config", config_path],
            "env": [
                sys.executable,
                "-m",
                "hermes_nb.env",
                "serve",
                f"{env_ref.file}:{env_ref.class_name}",
                "--config",
                config_path,
            ],
        }[name]

    def start_all(self) -> LaunchOutcome:
        """Bring the run up in dependency order: API healthy, then trainer registered, then environment registered.

        The three processes are *launched* together: the trainer retries its registration until the API answers
        and the environment waits for the trainer, so their interpreter start-up and imports (torch alone takes
        seconds) overlap instead of adding up. The readiness checks still pass in order, and a process that dies
        while an earlier one is coming up is named as the failure.
        """
        infra = self.config.infra
        api_url, inference_url = infra.api_url or "", infra.inference_url or ""
        for name in ("api", "trainer", "env"):
            self.launch(name, self.argv_for(name))
        waits: list[tuple[str, Callable[[], bool], float, str]] = [
            ("api", lambda: api_health(api_url) is not None, API_START_TIMEOUT, "API /health"),
            (
                "trainer",
                lambda: inference_healthy(inference_url) and registered(api_url, "trainer_registered"),
                TRAINER_START_TIMEOUT,
                "the inference server's /health and the trainer's registration",
            ),
            ("env", lambda: registered(api_url, "num_envs"), ENV_START_TIMEOUT, "the environment's registration"),
        ]
        for name, ready, timeout, what in waits:
            outcome = self.wait_until(name, ready, timeout, what)
            if not isinstance(outcome, Launched):
                return outcome
        return Launched()

    # ---- watching ----------------------------------------------------------------------------------------
    def watch(self) -> None:
        """Until the trainer finishes, a process dies, or a stop is requested."""
        last_sweep = 0.0
        while True:
            if self.stop_requested:
                self.stop()
                return
            trainer_code = self.children["trainer"].exit_code()
            if trainer_code == 0:
                self.finish_completed()
                return
            dead = self.dead_unexpectedly()
            if dead is not None:
                self.fail(self.failure(dead, "while the run was going on"))
                return
            if time.monotonic() - last_sweep > 1.0:
                self.remember_descendants()
                last_sweep = time.monotonic()
            time.sleep(MONITOR_SECONDS)

    def dead_unexpectedly(self) -> str | None:
        for name, child in self.children.items():
            code = child.exit_code()
            if code is None:
                continue
            # The environment exits 0 by itself once the trainer has been served its last batch.
            if name == "env" and code == 0 and api_current_step(self.config) >= self.state.total_steps:
                continue
            return name
        return None

    def remember_descendants(self) -> None:
        for child in self.children.values():
            for proc in processes.descendants(child.record):
                self.seen_descendants.setdefault(proc.pid, proc)

    # ---- ending ------------------------------------------------------------------------------------------
    def record_exits(self) -> None:
        now = time.time()
        for name, child in self.children.items():
            code = child.exit_code()
            record = self.state.processes[name]
            if code is not None and record.exit_code is None:
                self.state.processes[name] = record.model_copy(update={"exit_code": code, "ended_at": now})

    def shut_down(self, names: list[str], grace: float) -> None:
        # A last look at the tree while it is whole: W&B's service runs in a session of its own, out of reach of
        # the group signals, and may have started since the last sweep.
        self.remember_descendants()
        records = [self.children[n].record for n in names if n in self.children]
        processes.terminate_groups(records, grace_seconds=grace)
        for name in names:
            child = self.children.get(name)
            if child is not None:
                try:
                    child.popen.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    child.popen.kill()
                    child.popen.wait()
        processes.end_processes(self.seen_descendants.values(), grace_seconds=grace)

    def finish_completed(self) -> None:
        env = self.children.get("env")
        if env is not None:
            deadline = time.monotonic() + ENV_FINISH_GRACE
            while env.exit_code() is None and time.monotonic() < deadline and not self.stop_requested:
                time.sleep(MONITOR_SECONDS)
        self.shut_down(["env", "api"], PEER_STOP_GRACE)
        self.record_exits()
        self.set_status("completed", ended_at=time.time())

    def stop(self) -> None:
        self.set_status("stopping", stop_requested_at=self.state.stop_requested_at or time.time())
        self.remember_descendants()  # before the trainer exits and its W&B service stops being its child
        trainer = self.children.get("trainer")
        if trainer is not None and trainer.exit_code() is None:
            # The trainer alone first: it saves a final checkpoint, then its helpers may go.
            trainer.popen.send_signal(signal.SIGTERM)
            try:
                trainer.popen.wait(timeout=TRAINER_STOP_GRACE)
            except subprocess.TimeoutExpired:
                log.warning("trainer did not stop within %.0f s; killing it", TRAINER_STOP_GRACE)
        self.shut_down(list(self.children), PEER_STOP_GRACE)
        self.record_exits()
        self.set_status("stopped", ended_at=time.time())

    def fail(self, failure: LaunchFailed) -> None:
        """Record the failure first (a reader learns of it at once), then end the rest of the run."""
        log.error("run failed: %s %s (log %s)", failure.process, failure.cause, failure.log_path)
        self.record_exits()
        self.set_status("failed", ended_at=time.time(), error=failure.message(), failed_process=failure.process)
        self.shut_down(list(self.children), PEER_STOP_GRACE)
        self.record_exits()
        self.save()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, self.on_sigterm)
        try:
            outcome = self.start_all()
            if isinstance(outcome, StopRequested):
                self.stop()
                return 0
            if isinstance(outcome, LaunchFailed):
                self.fail(outcome)
                return 1
            self.set_status("running", started_at=time.time())
            self.watch()
            return 0 if self.state.status != "failed" else 1
        except Exception:  # the supervisor must never die leaving a run marked live
            self.fail(
                LaunchFailed(
                    process="supervisor",
                    cause=traceback.format_exc(limit=5),
                    log_path=str(self.paths.logs["supervisor"]),
                    log_tail=[],
                )
            )
            return 1


def child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _get_json(url: str) -> dict[str, object] | None:
    try:
        response = httpx.get(url, timeout=1.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def api_health(api_url: str) -> dict[str, object] | None:
    return _get_json(f"{api_url}/health")


def registered(api_url: str, key: str) -> bool:
    health = api_health(api_url)
    return bool(health and health.get(key))


def inference_healthy(inference_url: str) -> bool:
    return _get_json(f"{inference_url}/health") is not None


def api_current_step(config: RunConfig) -> int:
    health = api_health(config.infra.api_url or "")
    step = health.get("current_step") if health else None
    return step if isinstance(step, int) else -1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hermes_nb.runs.supervisor RUN_ID", file=sys.stderr)
        return 2
    paths = RunPaths.for_run(args[0])
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s supervisor %(levelname)s %(message)s", stream=sys.stderr
    )
    # One line per health poll would bury what the supervisor has to say.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    config = RunConfig.load(paths.config)
    state = read_run_state(paths.run_dir)
    me = psutil.Process()
    state.processes["supervisor"] = ProcessRecord(
        name="supervisor", pid=me.pid, started_at=me.create_time(), log_path=str(paths.logs["supervisor"])
    )
    supervisor = Supervisor(paths=paths, config=config, state=state)
    supervisor.save()
    return supervisor.run()


def detach_and_run(run_id: str) -> int:
    """Double fork so the supervisor is nobody's child: a closing kernel neither waits for it nor reaps it."""
    if os.fork() > 0:
        return 0
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    try:
        code = main([run_id])
    finally:
        logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--detach":
        raise SystemExit(detach_and_run(sys.argv[2]))
    raise SystemExit(main())
