"""The one door to a Tinker API server: the SDK import, the connection, the checks before a run starts, and every
blocking call with its retries.

Every SDK method hermes-nb calls is listed in ``SDK_CALLS`` with the keyword arguments it passes, and a test
checks that list against the source of the Tinker modules and against the newest SDK, so a renamed method or
argument shows up as a failing test rather than as a run that fails on a user's GPUs.

Faults: an error the SDK raises (it retries network errors inside each call itself) reaches ``RemoteCalls.wait``,
which retries network errors, 5xx and rate limits again with exponential backoff, counts every retry
(``TinkerRunInfo.retries``, shown by status), and fails the run with a ``TinkerError`` naming the server and the last
error once ``tinker.give_up_after_s`` has passed without an answer. While a call is in flight the SDK keeps its own
retries to itself, so the server's health endpoint is probed every few seconds: each probe that finds the server
away counts as a retry and is the last error, and a server away for ``tinker.give_up_after_s`` fails the call the
same way. A server that answers its health checks but not the call (a long queue, a JIT compilation) is given
``SLOW_CALL_S``. ``RemoteCalls.server_gone`` is the same probe for a trainer between calls (``TinkerBackend.watch``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from hermes_nb.errors import TinkerError
from hermes_nb.protocol.tinker import public_url

logger = logging.getLogger(__name__)

T = TypeVar("T")

KEY_VAR = "TINKER_API_KEY"
INSTALL_HINT = "pip install 'hermes-nb[tinker]'"
# The SDK and server pairs this version of hermes-nb was verified with (docs/tinker.md, "Versions verified").
VERIFIED = "skyrl 0.3.0 with tinker 0.24.1"
# Backoff between our own retries: doubling from 1 s, capped so a server that comes back is noticed soon.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
# The checks before a run starts: a server that cannot list its models within this is reported at once rather
# than after the SDK's own five minutes of retries.
PREFLIGHT_TIMEOUT_S = 30.0
# The Tinker API's health endpoint (the SDK's ``service.health_check`` asks the same path).
HEALTH_PATH = "/api/v1/healthz"
PROBE_TIMEOUT_S = 5.0
# How often a call in flight (or an idle trainer) probes the server: a server that died is noticed within this
# plus tinker.give_up_after_s; a probe is one small GET.
PROBE_EVERY_S = 5.0
# A call whose server stays healthy may take this long (a hosted queue under load, a first JIT compilation of a
# large model) before the run fails; tinker.give_up_after_s bounds a server that is away.
SLOW_CALL_S = 1800.0
# HTTP statuses worth another try: the server is overloaded, restarting or rate-limiting, not refusing the request.
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

# (object, method, keyword arguments hermes-nb passes): checked against the SDK by tests/unit/test_tinker_sdk.py.
SDK_CALLS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ServiceClient", "__init__", ("base_url", "api_key")),
    ("ServiceClient", "get_server_capabilities", ()),
    ("ServiceClient", "create_lora_training_client", ("base_model", "rank", "seed")),
    ("ServiceClient", "create_sampling_client", ("model_path",)),
    ("ServiceClient", "create_sampling_client", ("base_model",)),  # the KL penalty's reference
    ("ServiceClient", "create_rest_client", ()),
    ("TrainingClient", "forward", ("data", "loss_fn")),
    ("TrainingClient", "forward_backward", ("data", "loss_fn", "loss_fn_config")),
    ("TrainingClient", "optim_step", ("adam_params",)),
    ("TrainingClient", "save_state", ("name",)),
    ("TrainingClient", "load_state", ("path",)),
    ("TrainingClient", "load_state_with_optimizer", ("path",)),
    ("TrainingClient", "save_weights_for_sampler", ("name",)),
    ("TrainingClient", "save_weights_and_get_sampling_client", ()),
    ("TrainingClient", "get_tokenizer", ()),
    ("SamplingClient", "sample", ("prompt", "num_samples", "sampling_params")),
    ("SamplingClient", "compute_logprobs", ()),
    ("ModelInput", "from_ints", ("tokens",)),
    ("Datum", "__init__", ("model_input", "loss_fn_inputs")),
    ("AdamParams", "__init__", ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")),
    ("SamplingParams", "__init__", ("max_tokens", "temperature", "top_p", "seed", "stop")),
)


# Calls that exist in some SDK versions only: every SDK must offer one whole alternative of each group (checked like
# SDK_CALLS). The final weights' download moved from an archive of the sampler weights (tinker 0.24) to an export
# as "external weights", one signed URL per file (tinker 0.38), which SkyRL 0.3.0 does not serve.
SDK_ALTERNATIVES: dict[str, tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...]] = {
    "download the final weights": (
        (
            ("RestClient", "get_checkpoint_archive_url_from_tinker_path", ("tinker_path",)),
            ("RestClient", "get_checkpoint_archive_url", ("training_run_id", "checkpoint_id")),
        ),
        (
            ("ServiceClient", "create_training_client_from_state", ("path",)),
            ("TrainingClient", "save_weights_external", ("name", "ttl_seconds")),
            ("RestClient", "get_external_weights_urls", ("tinker_path",)),
            ("RestClient", "delete_checkpoint_from_tinker_path", ("tinker_path",)),
        ),
    ),
}


def tinker_model_name(base_model: str) -> str:
    """The name the server knows the base model by: a shipped model (``embedded``, ``embedded-chat``) is its
    directory (a self-hosted server started on it offers that path); anything else is passed as written
    (``Qwen/Qwen3-8B``, a path)."""
    from hermes_nb.config import embedded_model_dir

    shipped = embedded_model_dir(base_model)
    return str(shipped) if shipped is not None else base_model


def resolved(value: Any) -> Any:
    """An SDK answer, whether the SDK returns it or a future of it (tinker 0.38 returns futures of the clients that
    0.24 returned directly)."""
    return value.result() if hasattr(value, "result") else value


def import_tinker() -> ModuleType:
    """The ``tinker`` SDK, or a ``TinkerError`` saying how to install it."""
    try:
        import tinker
    except ImportError:
        raise TinkerError(f"trainer.backend: 'tinker' needs the tinker SDK; install it with {INSTALL_HINT}") from None
    return tinker


def sdk_version() -> str:
    return str(getattr(import_tinker(), "__version__", "unknown"))


def api_key() -> str:
    """``TINKER_API_KEY`` from the environment or a ``.env`` file; never printed, logged or passed on a command line."""
    from hermes_nb.system import home

    home.load_keys()
    key = os.environ.get(KEY_VAR, "")
    if not key:
        raise TinkerError(
            f"{KEY_VAR}: not set; trainer.backend 'tinker' needs it. Put {KEY_VAR}=tml-... in ~/.hermes/.env (or "
            f"{home.home_dir() / '.env'}) or the environment (a self-hosted server checks none, but the SDK wants "
            "one starting with 'tml-')"
        )
    return key


def connect(base_url: str | None) -> Any:
    """A ``tinker.ServiceClient`` for ``base_url`` (None: ``TINKER_BASE_URL``, else the SDK's default)."""
    key = api_key()  # first: a missing key is the one error, whatever else is wrong
    return import_tinker().ServiceClient(base_url=base_url or None, api_key=key)


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def is_retryable(exc: BaseException) -> bool:
    tinker = import_tinker()
    if isinstance(exc, tinker.APIConnectionError):  # includes timeouts
        return True
    status = status_of(exc)
    return status is not None and status in RETRYABLE_STATUSES


def describe(exc: BaseException) -> str:
    """One line for an SDK error: its status (and what a 429 means) and message, never a traceback."""
    status = status_of(exc)
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if status == 429:
        return f"rate limited or over quota (HTTP 429): {text}"
    return f"HTTP {status}: {text}" if status is not None else f"{type(exc).__name__}: {text}"


class RemoteCalls:
    """Runs blocking SDK calls with retries and a deadline, and counts what happened (read by the status).
    Shared by the trainer's calls and its idle-time watch (``server_gone``), hence the lock."""

    def __init__(self, base_url: str | None, give_up_after_s: float) -> None:
        self.url = public_url(base_url)
        self.give_up_after_s = give_up_after_s
        self.probe_every_s = min(PROBE_EVERY_S, give_up_after_s / 4)
        self.retries = 0
        self.rate_limited = 0
        self.last_error: str | None = None
        # When a probe first found the server away (None: it answered the last probe).
        self.away_since: float | None = None
        # Called after every counted retry, e.g. to rewrite the run's tinker.json for the status.
        self.on_retry: Callable[[], None] = lambda: None
        self._lock = threading.Lock()

    def wait(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` and, when it returns a future, its result; retried as the module docstring says."""
        deadline = time.monotonic() + self.give_up_after_s
        delay = RETRY_FIRST_S
        while True:
            try:
                return self._answer(what, call())
            except TinkerError:
                raise
            except Exception as exc:
                if not is_retryable(exc):
                    raise self.refused(what, exc) from None
                self._count(describe(exc), rate_limited=status_of(exc) == 429)
                if time.monotonic() + delay > deadline:
                    raise self.unavailable(what, self.last_error or "none") from None
                logger.warning("Tinker %s failed (%s); retry %d in %.0f s", what, self.last_error, self.retries, delay)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    def _answer(self, what: str, value: Any) -> Any:
        """The result of ``value`` (itself when it is no future), waited for in slices with a health probe after
        each. The SDK's future is waited on in a thread of ours: some of its futures cancel the request when a
        wait on them times out."""
        if not hasattr(value, "result"):
            return value
        answer = value if isinstance(value, concurrent.futures.Future) else in_thread(lambda: value.result())
        started = time.monotonic()
        while True:
            try:
                return answer.result(timeout=self.probe_every_s)
            except concurrent.futures.TimeoutError:
                if answer.done():  # the SDK's own timeout, not our slice
                    raise self.unavailable(what, self.last_error or "the SDK timed out") from None
            if self.server_gone():
                raise self.unavailable(what, self.last_error or "none")
            if time.monotonic() - started > max(SLOW_CALL_S, self.give_up_after_s):
                raise self.unavailable(what, f"no answer for {SLOW_CALL_S:.0f} s, though {HEALTH_PATH} answers")

    def server_gone(self) -> bool:
        """Probe the server once: True when it has been away for ``give_up_after_s`` (each failed probe counts as
        a retry and is the last error)."""
        problem = self.probe()
        now = time.monotonic()
        if problem is None:
            with self._lock:
                self.away_since = None
            return False
        self._count(problem)
        with self._lock:  # the trainer's calls and the watch probe at once: the first to find it away sets this
            if self.away_since is None:
                self.away_since = now
            away_since = self.away_since
        return now - away_since >= self.give_up_after_s

    def _count(self, error: str, rate_limited: bool = False) -> None:
        with self._lock:
            self.last_error = error
            self.retries += 1
            self.rate_limited += int(rate_limited)
        self.on_retry()

    def probe(self) -> str | None:
        """What is wrong with the server as its health endpoint tells (the SDK keeps its own retries' errors to
        itself); None when it answers."""
        import httpx

        if not self.url.startswith(("http://", "https://")):
            return None  # the SDK's default server: its address is the SDK's business
        try:
            answer = httpx.get(f"{self.url.rstrip('/')}{HEALTH_PATH}", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {' '.join(str(exc).split()) or 'no detail'}"
        if answer.status_code >= 500:
            return f"{HEALTH_PATH} answers HTTP {answer.status_code}"
        return None

    def unavailable(self, what: str, last_error: str) -> TinkerError:
        return TinkerError(
            f"Tinker server at {self.url} did not answer {what} for {self.give_up_after_s:.0f} s "
            f"(tinker.give_up_after_s); last error: {last_error}"
        )

    def refused(self, what: str, exc: BaseException) -> TinkerError:
        """A non-retryable answer. A 4xx/5xx on a well-formed request usually means the server speaks another
        version of the Tinker API than the SDK does, so the versions are named."""
        self.last_error = describe(exc)
        return TinkerError(
            f"Tinker server at {self.url} refused {what}: {self.last_error} (tinker SDK {sdk_version()}; the SDK and "
            f"the server must speak the same Tinker API version; verified: {VERIFIED})"
        )


def in_thread(call: Callable[[], T]) -> concurrent.futures.Future[T]:
    """Run a blocking SDK call on a daemon thread, so a caller can stop waiting for it (the SDK's synchronous
    methods retry a missing server for minutes, and a daemon thread never holds the process open)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name="tinker-call", daemon=True).start()
    return future


def offered_models(service: Any, calls: RemoteCalls) -> list[str]:
    capabilities = calls.wait("get_server_capabilities", lambda: in_thread(service.get_server_capabilities))
    return [str(m.model_name) for m in capabilities.supported_models]


def check_base_model(service: Any, base_model: str, calls: RemoteCalls) -> None:
    """Refuse a base model the server does not offer, listing what it does."""
    offered = offered_models(service, calls)
    if base_model not in offered:
        shown = ", ".join(repr(m) for m in offered) or "none"
        raise TinkerError(
            f"trainer.base_model: {base_model!r} is not offered by the Tinker server at {calls.url}; it offers {shown}"
        )


def check_algorithm(config: Any) -> None:
    """Refuse the trainer fields the Tinker route cannot honour (``hermes_nb.tinker.algorithms``), naming the server."""
    from hermes_nb.tinker.algorithms import tinker_field_problem

    problem = tinker_field_problem(config.trainer, public_url(config.tinker.base_url))
    if problem is not None:
        raise TinkerError(problem)


def check_config(config: Any) -> None:
    """What can be known before a run on Tinker starts: the algorithm's fields, a LoRA rank, a key, a server that
    answers and offers the base model. Each failure is one ``TinkerError`` line; nothing is created. Runs in
    ``tinker_preflight``'s child process: the SDK's threads and connections never enter the caller's (a notebook
    kernel's) process."""
    if config.trainer.lora_rank <= 0:
        raise TinkerError("trainer.lora_rank: Tinker trains LoRA adapters only; set a rank >= 1 (e.g. 32)")
    check_algorithm(config)
    service = connect(config.tinker.base_url)
    calls = RemoteCalls(config.tinker.base_url, min(config.tinker.give_up_after_s, PREFLIGHT_TIMEOUT_S))
    check_base_model(service, tinker_model_name(config.trainer.base_model), calls)
