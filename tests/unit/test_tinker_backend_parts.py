"""The Tinker backend's own logic, without a server: datums in Tinker's shape, the figures computed from what Tinker
returns, how the engine ends a sample, retries, and the remote-side records. (Against a real server:
tests/e2e/test_tinker_backend.py.)"""

from __future__ import annotations

import concurrent.futures
import http.server
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tinker
import torch

from hermes_nb.config import RunConfig, TinkerConfig
from hermes_nb.errors import TinkerError, TransferError
from hermes_nb.inference.sampler import SampleRow
from hermes_nb.protocol.run_files import TRAINER_STATE_FILE
from hermes_nb.protocol.tinker import (
    SDK_DEFAULT_URL,
    TinkerCheckpoint,
    TinkerRunInfo,
    public_url,
    read_run_info,
    write_checkpoint,
    write_run_info,
)
from hermes_nb.runs.transfer.resolve import check_tinker_source
from hermes_nb.system.net import free_port
from hermes_nb.tinker import datums as tinker_datums
from hermes_nb.tinker.backend import TinkerBackend, sampler_weights_path
from hermes_nb.tinker.calls import RemoteCalls
from hermes_nb.tinker.engine import _groups, trim
from hermes_nb.tinker.preflight import check_before_start
from hermes_nb.trainer.types import Datum, LossConfig


def datum(advantage: float, sampling: list[float] | None = None) -> Datum:
    # Two prompt positions (weight 0), two completion positions (weight 1).
    return Datum(
        input_tokens_T=[5, 6, 7, 8],
        target_tokens_T=[6, 7, 8, 2],
        weights_T=[0.0, 0.0, 1.0, 1.0],
        sampling_logprobs_T=sampling or [1.0, 1.0, -0.5, -1.0],
        advantages_T=[advantage] * 4,
    )


def test_advantages_are_scaled_to_the_batch_token_mean_and_zero_outside_the_completion() -> None:
    data = [datum(1.0), datum(-1.0)]

    (first, second) = tinker_datums.to_tinker(tinker, data)

    assert first.loss_fn_inputs["advantages"].tolist() == [0.0, 0.0, 0.25, 0.25]
    assert second.loss_fn_inputs["advantages"].tolist() == [0.0, 0.0, -0.25, -0.25]
    assert first.loss_fn_inputs["logprobs"].tolist() == [0.0, 0.0, -0.5, -1.0]
    assert first.model_input.to_ints() == [5, 6, 7, 8]


def test_the_loss_from_returned_logprobs_is_the_token_mean_importance_sampling_loss() -> None:
    data = [datum(1.0), datum(-1.0)]
    # The current policy puts each completion token 0.1 nats above the sampler.
    current = [[9.0, 9.0, -0.4, -0.9], [9.0, 9.0, -0.4, -0.9]]

    output = tinker_datums.step_output(data, current, "importance_sampling", None)

    ratio = math.exp(0.1)
    assert output.num_trained_tokens == 4
    assert output.loss == pytest.approx((-ratio * 2 + ratio * 2) / 4)
    assert output.metrics["ratio_mean"] == pytest.approx(ratio)
    assert output.metrics["kl_sample_current"] == pytest.approx(-0.1)


def test_ppo_sends_its_clip_range_as_ratio_thresholds() -> None:
    config = LossConfig(clip_epsilon_low=0.1, clip_epsilon_high=0.3)

    assert tinker_datums.loss_fn_config("ppo", config) == {"clip_low_threshold": 0.9, "clip_high_threshold": 1.3}
    assert tinker_datums.loss_fn_config("importance_sampling", config) is None


def test_a_sample_ends_after_its_stop_token_or_stop_string_like_the_local_sampler() -> None:
    decode = {1: "a", 2: "</s>", 3: "b", 4: "\n"}.get

    def text(ids: list[int]) -> str:
        return "".join(decode(i) or "?" for i in ids)

    by_token = trim(SampleRow(prompt=[9], max_tokens=8, stop_token_ids=frozenset({2})), [1, 2, 3], [-1, -2, -3], text)
    by_string = trim(SampleRow(prompt=[9], max_tokens=8, stop_strings=("\n",)), [1, 4, 3], [-1, -2, -3], text)
    by_length = trim(SampleRow(prompt=[9], max_tokens=2), [1, 3, 3], [-1, -2, -3], text)

    assert (by_token.token_ids, by_token.logprobs, by_token.finish_reason) == ([1, 2], [-1.0, -2.0], "stop")
    assert (by_string.token_ids, by_string.finish_reason) == ([1, 4], "stop")
    assert (by_length.token_ids, by_length.finish_reason) == ([1, 3], "length")


def test_identical_unseeded_rows_go_as_one_request_with_num_samples() -> None:
    row, other = SampleRow(prompt=[1, 2], max_tokens=4), SampleRow(prompt=[3], max_tokens=4)
    seeded = SampleRow(prompt=[1, 2], max_tokens=4, seed=7)

    assert _groups([row, row, row, other, other, seeded, seeded]) == [(row, 3), (other, 2), (seeded, 1), (seeded, 1)]


def test_skyrl_sampler_paths_are_normalised_to_the_form_the_sdk_parses() -> None:
    assert sampler_weights_path("tinker://model_1/step_3") == "tinker://model_1/sampler_weights/step_3"
    assert sampler_weights_path("tinker://run/sampler_weights/x") == "tinker://run/sampler_weights/x"


def test_the_status_url_carries_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)

    assert public_url("https://user:tml-secret@tinker.example/api?token=tml-x") == "https://tinker.example/api"
    assert public_url(None) == SDK_DEFAULT_URL
    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:8000")
    assert public_url(None) == "http://127.0.0.1:8000"


def test_run_info_round_trips_through_the_run_directory(tmp_path: Path) -> None:
    info = TinkerRunInfo(base_url="http://127.0.0.1:1", base_model="m", lora_rank=8, sdk_version="0.24.1", retries=2)

    write_run_info(tmp_path, info)

    assert read_run_info(tmp_path) == info
    assert read_run_info(tmp_path / "elsewhere") is None


def connection_error() -> tinker.APIConnectionError:
    return tinker.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:1/api/v1/forward_backward"))


def test_network_errors_are_retried_with_backoff_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("hermes_nb.tinker.calls.time.sleep", sleeps.append)
    answers = iter([connection_error(), connection_error(), "done"])
    calls = RemoteCalls("http://127.0.0.1:1", give_up_after_s=60)

    def call() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert calls.wait("forward_backward", call) == "done"
    assert (calls.retries, sleeps) == (2, [1.0, 2.0])
    assert calls.last_error is not None and "APIConnectionError" in calls.last_error


def test_a_server_that_stays_away_fails_naming_tinker_and_the_last_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hermes_nb.tinker.calls.time.sleep", lambda _s: None)
    calls = RemoteCalls("http://127.0.0.1:1", give_up_after_s=0.5)

    def refuse() -> None:
        raise connection_error()

    with pytest.raises(
        TinkerError, match=r"Tinker server at http://127.0.0.1:1 did not answer optim_step .*last error"
    ):
        calls.wait("optim_step", refuse)


def test_a_call_that_never_returns_fails_after_give_up_with_what_the_health_probe_saw() -> None:
    calls = RemoteCalls("http://127.0.0.1:1", give_up_after_s=0.2)
    never: concurrent.futures.Future[None] = concurrent.futures.Future()

    with pytest.raises(TinkerError, match="did not answer sample for 0 s.*last error: ConnectError"):
        calls.wait("sample", lambda: never)


def test_a_refused_request_names_the_sdk_version_and_is_not_retried() -> None:
    calls = RemoteCalls("http://127.0.0.1:1", give_up_after_s=60)
    response = httpx.Response(422, request=httpx.Request("POST", "http://127.0.0.1:1/api/v1/forward_backward"))

    def refuse() -> None:
        raise tinker.UnprocessableEntityError("bad body", response=response, body=None)

    with pytest.raises(TinkerError, match=r"refused forward_backward: HTTP 422.*tinker SDK 0\.24\.1"):
        calls.wait("forward_backward", refuse)
    assert calls.retries == 0


def tinker_config(**trainer: object) -> RunConfig:
    config = RunConfig.model_validate({"trainer": {"backend": "tinker", "lora_rank": 8, **trainer}})
    return config.model_copy(
        update={"tinker": TinkerConfig(base_url=f"http://127.0.0.1:{free_port()}", give_up_after_s=1)}
    )


def test_before_start_a_missing_key_is_one_error_saying_where_to_put_it() -> None:
    with pytest.raises(TinkerError, match=r"TINKER_API_KEY: not set.*~/.hermes/.env"):
        check_before_start(tinker_config())


def test_before_start_a_lora_rank_of_zero_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")

    with pytest.raises(TinkerError, match="trainer.lora_rank: Tinker trains LoRA adapters only"):
        check_before_start(tinker_config(lora_rank=0))


def test_before_start_a_server_that_does_not_answer_is_named_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")
    config = tinker_config()

    with pytest.raises(TinkerError, match=r"Tinker server at http://127.0.0.1:\d+ did not answer .*ConnectError") as e:
        check_before_start(config)
    assert "tml-test" not in str(e.value)


def test_a_call_in_flight_whose_server_is_away_counts_each_failed_probe_and_fails_naming_it() -> None:
    calls = RemoteCalls(f"http://127.0.0.1:{free_port()}", give_up_after_s=0.4)
    never: concurrent.futures.Future[None] = concurrent.futures.Future()
    counted: list[int] = []
    calls.on_retry = lambda: counted.append(calls.retries)

    with pytest.raises(TinkerError, match="did not answer forward_backward for 0 s.*last error: ConnectError"):
        calls.wait("forward_backward", lambda: never)
    assert calls.retries >= 2 and counted == list(range(1, calls.retries + 1))


@pytest.fixture
def healthy_server() -> Iterator[str]:
    """A server whose health endpoint answers 200: what a Tinker server busy with a long call looks like."""

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_slow_call_to_a_healthy_server_outlasts_the_give_up_bound(healthy_server: str) -> None:
    calls = RemoteCalls(healthy_server, give_up_after_s=0.2)
    slow: concurrent.futures.Future[str] = concurrent.futures.Future()
    threading.Timer(1.0, lambda: slow.set_result("done")).start()
    started = time.monotonic()

    assert calls.wait("forward_backward", lambda: slow) == "done"
    assert time.monotonic() - started >= 1.0 and calls.retries == 0


class RecordingTraining:
    """Records which SDK load the backend asks for; SkyRL 0.3.0 restores the optimizer on either, so only the
    request tells them apart."""

    def __init__(self) -> None:
        self.loads: list[tuple[str, str]] = []

    def load_state(self, path: str) -> str:
        self.loads.append(("load_state", path))
        return "loaded"

    def load_state_with_optimizer(self, path: str) -> str:
        self.loads.append(("load_state_with_optimizer", path))
        return "loaded"


def test_resume_asks_for_the_optimizer_state_and_transfer_for_the_weights_only(tmp_path: Path) -> None:
    state = "tinker://model_1/weights/step_3_1"
    write_checkpoint(tmp_path, TinkerCheckpoint(state_path=state, base_model="m", lora_rank=8, base_url="u"))
    torch.save({"step": 3}, tmp_path / TRAINER_STATE_FILE)
    backend = TinkerBackend.__new__(TinkerBackend)  # no server: only the load calls are exercised
    backend.training, backend.calls = RecordingTraining(), RemoteCalls("http://127.0.0.1:1", give_up_after_s=1)
    backend.base_model, backend.lora_rank = "m", 8

    assert backend.load_state(tmp_path) == {"step": 3}
    backend._load_initial_weights(tmp_path)

    assert backend.training.loads == [("load_state_with_optimizer", state), ("load_state", state)]


def test_a_tinker_run_refuses_a_checkpoint_of_another_rank_naming_both() -> None:
    saved = TinkerCheckpoint(state_path="tinker://r/weights/w", base_model="m", lora_rank=16, base_url="u")
    config = tinker_config(base_model="m")

    with pytest.raises(TransferError, match=r"model_path: .* is LoRA rank 16 on .m.; this run trains rank 8"):
        check_tinker_source(config, Path("/x/step_3"), saved)
