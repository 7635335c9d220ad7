"""The run supervisor: one detached process per run that starts, watches and ends the run's three processes.

It owns ``run.json``: it is the only writer while it lives. Start-up waits on health checks, never on fixed
sleeps; every wait has a timeout; every outcome is a typed value that the caller handles. SIGTERM asks it to
stop the run gracefully (the trainer saves a final checkpoint first).

    python -m hermes_nb.runs.supervision.supervisor RUN_ID
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError
from hermes_nb.frameworks import registry
from hermes_nb.frameworks.contract import ChildCommand, ServeRequest
from hermes_nb.health import HealthWatch
from hermes_nb.inference.health import health_or_none
from hermes_nb.metrics.reader import read_metrics
from hermes_nb.protocol.auth import API_SECRET_ENV, SECRET_ENV
from hermes_nb.protocol.health import Finding, read_findings
from hermes_nb.protocol.run_files import PROCESS_NAMES, RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, RunState, read_run_state
from hermes_nb.runs import prices
from hermes_nb.runs.estimate import estimate_config, estimated_cost
from hermes_nb.runs.prices import Price
from hermes_nb.runs.supervision import graces
from hermes_nb.runs.supervision.cost_meter import CostMeter
from hermes_nb.runs.supervision.outcomes import Launched, LaunchFailed, LaunchOutcome, StopRequested
from hermes_nb.runs.supervision.ports import PORT_BINDERS, pick_ports, with_ports
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.runs.supervision.trajectory_api_forms import ApiProbe, TrajectoryApiForm, api_form
from hermes_nb.system import disk, processes, warm_process
from hermes_nb.system.home import run_paths
from hermes_nb.system.logtail import tail_lines
from hermes_nb.system.secrets import read_run_secret
from hermes_nb.system.side_python import env_python_environment
from hermes_nb.trajectory_api.client import ApiReadiness, SyncTrajectoryClient, TrajectoryAPIError

log = logging.getLogger("hermes_nb.supervisor")

# Generous for a cold disk cache on two cores; a healthy start takes a few seconds (bench/startup.py).
API_START_TIMEOUT = 60.0
TRAINER_START_TIMEOUT = 240.0
ENV_START_TIMEOUT = 90.0
POLL_SECONDS = 0.05
MONITOR_SECONDS = 0.1
# After the trainer completes, the environment runs its final evaluation and exits by itself.
ENV_FINISH_GRACE = 60.0
LOG_TAIL_LINES = 20
# A local /health answers in milliseconds; start-up polls every POLL_SECONDS and must not hang on one answer.
HEALTH_TIMEOUT_S = 1.0
# A port picked free can be taken by another process before the child binds it (hermes_nb.system.net); the run
# then starts again on new ports. Each retry needs another such race, so a few attempts are plenty.
PORT_ATTEMPTS = 3
# What uvicorn and Python's OSError both say of EADDRINUSE (lower-cased).
PORT_IN_USE = "address already in use"
# The trainer's process: an entry point above the parts it assembles (``hermes_nb.processes``), named once, here.
TRAINER_MODULE = "hermes_nb.processes.trainer"


@dataclass
class Child:
    record: ProcessRecord
    popen: subprocess.Popen[bytes]
    # Where this launch's output starts in its log: a log is appended to when the run starts again on new ports.
    log_offset: int = 0

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
    # One client for the run's API, kept across polls (it remembers that a run-api has no /health).
    api: SyncTrajectoryClient | None = field(default=None, repr=False)
    # The run's secret (``protocol.auth``): its children get it in their environment, its polls send it.
    secret: str | None = field(default=None, repr=False)
    # The run's trajectory API: its own, or an external one (``trajectory_api_forms``); asked, never told apart.
    api_form: TrajectoryApiForm = field(init=False, repr=False)
    # Processes started ahead with their imports done (``runs.supervision.warm_kit``), by the name of the process
    # each can become; each is used once, for the first launch of its name whose command it can run, or released.
    warm: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    # CPU and memory of each process, sampled each second of the watch (``cost.json``).
    meter: CostMeter = field(default_factory=CostMeter, repr=False)
    # The checks only the clock can answer (a stall), over the trainer's rows read as they come (``health.py``).
    health: HealthWatch = field(init=False, repr=False)
    metrics_offset: int = field(default=0, repr=False)
    health_step: int = field(default=0, repr=False)  # the newest step those rows reached

    def __post_init__(self) -> None:
        self.api_form = api_form(self.config, self.secret, self.paths.logs["supervisor"])
        self.health = HealthWatch(self.paths.health, "supervisor")
        self.meter.price = self.run_price()

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
    def launch(self, name: str, argv: list[str], environment: dict[str, str] | None = None) -> Child:
        log_path = self.paths.logs[name]
        offset = log_path.stat().st_size if log_path.is_file() else 0
        env = environment if environment is not None else self.environment_for(name)
        popen = self.assign_warm(name, argv, env, log_path)
        how = "started" if popen is None else "warm process became"
        if popen is None:
            popen, record = processes.spawn(name, argv, log_path, env=env)
        else:
            record = processes.process_record(name, popen.pid, log_path)
        child = Child(record=record, popen=popen, log_offset=offset)
        self.children[name] = child
        self.state.processes[name] = record
        self.save()
        log.info("%s %s pid %d: %s", how, name, popen.pid, " ".join(argv))
        return child

    def assign_warm(
        self, name: str, argv: list[str], env: dict[str, str], log_path: Path
    ) -> subprocess.Popen[bytes] | None:
        """The warm process for ``name``, made the command ``argv``; None when there is none or it cannot be."""
        process = self.warm.pop(name, None)
        if process is None:
            return None
        assignment = warm_process.assignment_for(argv, env, log_path)
        if assignment is not None and warm_process.assign(process, assignment):
            return process
        warm_process.release(process)
        return None

    def release_warm(self) -> None:
        """End the warm processes the run did not use (no environment of its own, an API elsewhere)."""
        for process in self.warm.values():
            warm_process.release(process)
        self.warm.clear()

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
        full = disk.disk_full_cause(code, tail)
        if full is not None:  # named first: it is what the user has to fix before resuming
            cause = f"failed: {full}; free some space, then resume the run from its last checkpoint ({cause})"
        failed = LaunchFailed(process=name, cause=cause, log_path=str(log_path), log_tail=tail)
        # An API that went away is the cause of whatever failed meanwhile (only an external one can be gone).
        return self.api_form.blame(failed, trainer_registered=self.state.status == "running")

    def first_dead_child(self) -> str | None:
        for name, child in self.children.items():
            if child.exit_code() is not None:
                return name
        return None

    def environment_for(self, name: str) -> dict[str, str]:
        """A child's process environment: this one's, with the run's secrets (``protocol.auth``)."""
        base = {k: v for k, v in processes.child_environment().items() if k not in (SECRET_ENV, API_SECRET_ENV)}
        if self.secret:
            base[SECRET_ENV] = self.secret
        if api_secret := self.api_form.secret:
            base[API_SECRET_ENV] = api_secret
        return base

    def command_for(self, name: str) -> ChildCommand:
        """How the run's process ``name`` starts, from one table: the API's from its form (only an owned one is
        started), the environment's from its framework's adapter, which also names the files it reads (written
        for these ports by ``start_all``)."""
        table: dict[str, Callable[[dict[str, str]], ChildCommand]] = {
            "api": lambda base: ChildCommand(argv=self.api_form.command(self.config), environment=base),
            "trainer": self.trainer_command,
            "env": self.env_command,
        }
        return table[name](self.environment_for(name))

    def trainer_command(self, base: dict[str, str]) -> ChildCommand:
        """The trainer, under the vLLM Python when its sampler is vLLM in another venv (``infra.trainer_python``,
        checked at start: ``hermes_nb.runs.sampler_choice``), which imports ``hermes_nb`` through the package link."""
        python = self.config.infra.trainer_python
        environment = base if python is None else env_python_environment(base)
        argv = [python or sys.executable, "-m", TRAINER_MODULE, "--config", str(self.paths.config)]
        return ChildCommand(argv=argv, environment=environment)

    def env_command(self, base: dict[str, str]) -> ChildCommand:
        env_ref = self.config.environment
        assert env_ref is not None  # the launcher refuses to start without one
        request = ServeRequest(
            config=self.config,
            paths=self.paths,
            base_environment=base,
            secret=self.secret,
            api_secret=self.api_form.secret,
        )
        return registry.adapter(env_ref.framework).serve(request)

    def start_all(self) -> LaunchOutcome:
        """Bring the run up in dependency order: API healthy, then trainer registered, then environment registered.

        The three processes are *launched* together: the trainer retries its registration until the API answers
        and the environment waits for the trainer, so their interpreter start-up and imports (torch alone takes
        seconds) overlap instead of adding up. The readiness checks still pass in order, and a process that dies
        while an earlier one is coming up is named as the failure.
        """
        outcome = self.api_form.before_start(self.config, self.api_probe())
        if not isinstance(outcome, Launched):
            return outcome
        names = self.process_names()
        for name in names:
            command = self.command_for(name)
            command.write_files()  # written aside and renamed: a port retry rewrites them, a reader sees whole files
            self.launch(name, command.argv, command.environment)
        waits: list[tuple[str, Callable[[], bool], float, str]] = [
            ("api", lambda: self.api_readiness() is not None, API_START_TIMEOUT, "the API's /status"),
            (
                "trainer",
                lambda: self.inference_healthy() and self.trainer_registered(),
                TRAINER_START_TIMEOUT,
                "the inference server's /health and the trainer's registration",
            ),
            ("env", self.env_registered, ENV_START_TIMEOUT, "the environment's registration"),
        ]
        for name, ready, timeout, what in [w for w in waits if w[0] in names]:
            outcome = self.wait_until(name, ready, timeout, what)
            if not isinstance(outcome, Launched):
                return outcome
        return Launched()

    def process_names(self) -> list[str]:
        """The processes this run starts: the API only when it is the run's own, no environment when
        environments started elsewhere feed that API (``trainer.start_environment``)."""
        skip = set()
        if not self.api_form.launched:
            skip.add("api")
        if not self.config.trainer.start_environment:
            skip.add("env")
        return [name for name in PROCESS_NAMES if name not in skip]

    def api_probe(self) -> ApiProbe:
        return ApiProbe(
            readiness=self.api_readiness, stop_requested=lambda: self.stop_requested, poll_seconds=POLL_SECONDS
        )

    def api_client(self) -> SyncTrajectoryClient:
        """The one client of the run's API (its own or the external one), made again when the run moved ports."""
        url = (self.config.infra.api_url or "").rstrip("/")
        if self.api is None or self.api.base_url != url:
            if self.api is not None:
                self.api.close()  # the run moved to new ports
            self.api = SyncTrajectoryClient(url, timeout=HEALTH_TIMEOUT_S, secret=self.api_form.secret)
        return self.api

    def api_readiness(self) -> ApiReadiness | None:
        """The run's API's readiness, or ``None`` while it cannot answer."""
        return self.api_client().readiness_or_none()

    def inference_healthy(self) -> bool:
        """The trainer's inference server serves a policy (its ``/health`` answers 503 while it loads)."""
        url = self.config.infra.inference_url or ""
        return health_or_none(url, secret=self.secret, timeout=HEALTH_TIMEOUT_S) is not None

    def trainer_registered(self) -> bool:
        # An external API that already had this run's trainer registered (a resumed run) says so before this
        # trainer registers again; its inference server's /health, checked beside this, still waits for the model.
        ready = self.api_readiness()
        return ready is not None and ready.trainer_registered

    def env_registered(self) -> bool:
        """The environment registered. An API without ``/health`` (a run-api) cannot tell: the environment then
        counts as up once it runs, and its failures are caught by its exit, as during the run."""
        ready = self.api_readiness()
        if ready is None:
            return False
        if ready.num_envs is None:
            log.info("the trajectory API cannot report registrations (no /health); the environment is watched")
            return True
        return ready.num_envs > self.api_form.envs_before

    def start_on_free_ports(self) -> LaunchOutcome:
        """``start_all``; once more on new ports (up to ``PORT_ATTEMPTS`` in all) while a process exits because
        its port was taken between the moment it was picked and the moment the process bound it."""
        for _ in range(PORT_ATTEMPTS - 1):
            outcome = self.start_all()
            if not (isinstance(outcome, LaunchFailed) and self.port_was_taken(outcome.process)):
                return outcome
            log.warning("%s: its port was taken before it could bind it; starting again on new ports", outcome.process)
            self.shut_down(list(self.children), graces.PEER_STOP_GRACE)
            if self.stop_requested:
                return StopRequested()
            self.move_to_new_ports()
        return self.start_all()

    def port_was_taken(self, name: str) -> bool:
        """Whether ``name`` exited because another process held its port (its output since launch says so)."""
        child = self.children.get(name)
        if name not in PORT_BINDERS or child is None or child.exit_code() is None:
            return False
        with open(self.paths.logs[name], "rb") as log_file:
            log_file.seek(child.log_offset)
            output = log_file.read().decode("utf-8", errors="replace")
        return PORT_IN_USE in output.lower()

    def move_to_new_ports(self) -> None:
        """New free ports, in config.yaml (every process of the run reads its URLs there) and in run.json."""
        api_port, inference_port = pick_ports()
        self.config = with_ports(self.config, api_port, inference_port)
        # Loaded from the config.yaml the launcher wrote with every key redacted, so this writes no key either.
        self.config.save(self.paths.config)
        self.state = self.state.model_copy(update={"api_port": api_port, "inference_port": inference_port})
        self.save()
        log.info("new ports: API %d, inference %d", api_port, inference_port)

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
                self.measure()
                self.check_health()
                lost = self.api_form.lost(self.api_probe())
                if lost is not None:
                    self.fail(lost)
                    return
                if (finding := self.health_stop()) is not None:
                    log.warning("stopping: health.stop_on names %s: %s", finding.name, finding.text())
                    self.state = self.state.model_copy(update={"stopped_by": finding.text()})
                    self.stop()
                    return
                last_sweep = time.monotonic()
            time.sleep(MONITOR_SECONDS)

    def measure(self) -> None:
        self.meter.sample({name: child.record for name, child in self.children.items()})
        with contextlib.suppress(OSError):  # a full disk: the record waits, the run goes on
            self.meter.write_soon(self.paths, self.state, self.group_size())

    def group_size(self) -> int:
        return int(self.config.env_value("group_size"))

    def check_health(self) -> None:
        """Show the supervisor's checks the trainer's new rows, then the clock."""
        rows, self.metrics_offset = read_metrics(self.paths.metrics, self.metrics_offset)
        for row in rows:
            self.health.observe(row.step, row.values, at=row.time)
            self.health_step = row.step
        self.health.tick(self.health_step)

    def health_stop(self) -> Finding | None:
        """The first finding of a check that ``health.stop_on`` names, if one began."""
        wanted = set(self.config.health.stop_on)
        if not wanted:
            return None
        return next((f for f in read_findings(self.paths.health) if f.name in wanted), None)

    def dead_unexpectedly(self) -> str | None:
        for name, child in self.children.items():
            code = child.exit_code()
            if code is None:
                continue
            # The environment exits 0 by itself once the trainer has been served its last batch.
            if name == "env" and code == 0 and self.api_current_step() >= self.state.total_steps:
                continue
            return name
        return None

    def api_current_step(self) -> int:
        """The API's step from ``/status``, which every Atropos API answers (run-api has no ``/health``); -1 when
        the API cannot answer."""
        try:
            return self.api_client().status().current_step
        except TrajectoryAPIError:
            return -1

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
        self.shut_down(["env", "api"], graces.PEER_STOP_GRACE)
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
                trainer.popen.wait(timeout=graces.TRAINER_STOP_GRACE)
            except subprocess.TimeoutExpired:
                log.warning("trainer did not stop within %.0f s; killing it", graces.TRAINER_STOP_GRACE)
        self.shut_down(list(self.children), graces.PEER_STOP_GRACE)
        self.record_exits()
        self.set_status("stopped", ended_at=time.time())

    def fail(self, failure: LaunchFailed) -> None:
        """Record the failure first (a reader learns of it at once), then end the rest of the run."""
        log.error("run failed: %s %s (log %s)", failure.process, failure.cause, failure.log_path)
        self.record_exits()
        self.set_status("failed", ended_at=time.time(), error=failure.message(), failed_process=failure.process)
        self.shut_down(list(self.children), graces.PEER_STOP_GRACE)
        self.record_exits()
        self.save()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, self.on_sigterm)
        try:
            outcome = self.start_on_free_ports()
            self.release_warm()
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
        finally:
            self.release_warm()
            self.close_api()
            self.record_cost()

    def record_cost(self) -> None:
        """The final ``cost.json``, with the pre-run estimate beside the actual figures; a disk too full for it
        loses the record, not the run's ending."""
        self.estimate_cost()
        try:
            self.meter.write(self.paths, self.state, self.group_size(), final=self.state.is_terminal)
        except OSError as exc:
            log.warning("cost.json not written: %s", exc)

    def estimate_cost(self) -> None:
        """What ``rl_estimate_run`` would have said of this run, made once it has ended so that it costs the run
        nothing (it reads only the runs begun before this one). An estimate that cannot be made is left out."""
        try:
            self.meter.estimate = estimated_cost(estimate_config(self.config))
        except (HermesNBError, OSError, ValueError) as exc:
            log.warning("no estimate beside the run's cost: %s", exc)

    def run_price(self) -> Price | None:
        """The user's price of this run's tokens; a price table that cannot be read loses the money figure, not
        the run."""
        try:
            return prices.run_price(self.config)
        except HermesNBError as exc:
            log.warning("the run's cost has no price: %s", exc)
            return None

    def close_api(self) -> None:
        if self.api is not None:
            self.api.close()
            self.api = None


def main(argv: list[str] | None = None, warm: dict[str, subprocess.Popen[bytes]] | None = None) -> int:
    """Supervise the run ``argv[0]``; ``warm``: processes started ahead for it (``runs.supervision.warm_kit``)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hermes_nb.runs.supervision.supervisor RUN_ID", file=sys.stderr)
        return 2
    paths = run_paths(args[0])
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
    supervisor = Supervisor(
        paths=paths, config=config, state=state, secret=read_run_secret(paths.run_dir), warm=dict(warm or {})
    )
    supervisor.save()
    return supervisor.run()


def detach_and_run(run_id: str) -> int:
    """Double fork so the supervisor is nobody's child: a closing kernel neither waits for it nor reaps it."""
    return processes.run_detached(lambda: main([run_id]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--detach":
        raise SystemExit(detach_and_run(sys.argv[2]))
    raise SystemExit(main())
