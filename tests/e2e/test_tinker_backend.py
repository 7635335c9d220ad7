"""Runs with ``trainer.backend: tinker`` against a real Tinker API server: SkyRL tx on CPU (``tests/tinker_server.py``,
from the ``skyrl`` side environment) serving hermes-nb's embedded model, driven through the tinker SDK the server
speaks (0.24.1). One server serves the module (it takes ~20 s to start and JIT-compiles per batch shape); each
test trains its own LoRA adapter on it, except the one that kills its server, which starts its own.
"""

from __future__ import annotations

import gc
import json
import math
import os
import random
import signal
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from run_helpers import QUICK_TEST_CONFIG, alive_after, finite, run, run_pids, wait_for_status
from tinker_server import FAKE_KEY, START_TIMEOUT_S, SkyrlServer, start_skyrl_server

from hermes_nb.api import (
    rl_check_status,
    rl_edit_config,
    rl_get_results,
    rl_load_config,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
    rl_test_inference,
)
from hermes_nb.config import RunConfig
from hermes_nb.env.splits import GeneratedItems
from hermes_nb.env_host.loading import load_env_class, make_env
from hermes_nb.errors import TinkerError, TransferError
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT, TRAIN_KL, TRAIN_TEACHER_KL
from hermes_nb.protocol.run_files import CONFIG_FILE
from hermes_nb.protocol.tinker import read_checkpoint
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.runs.table.results import StartResult
from hermes_nb.system.home import embedded_base_model_dir
from hermes_nb.tinker.backend import TinkerBackend
from hermes_nb.trainer.run.checkpoints import save_checkpoint
from hermes_nb.trainer.run.main import restore
from hermes_nb.trainer.types import AdamParams, Datum

# CPU JAX: the first forward_backward of each batch shape compiles (5-30 s); later ones take ~1 s.
RUN_TIMEOUT = 300.0
# pytest-timeout counts fixtures: the first test of the module waits for the server's start, and a test waits for
# at most two runs of its own (or the completed fixture's run and one of its own). Above that, so a slow step fails
# with the named wait's message (which carries the server's log) instead of pytest-timeout's.
TEST_TIMEOUT_S = START_TIMEOUT_S + 2 * RUN_TIMEOUT + 60

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]
SHORT_RUN = {"total_steps": 3, "trainer.save_checkpoint_interval": 2, "steps_per_eval": 0, "max_num_workers": 4}
ON_TINKER = {"trainer.backend": "tinker", "trainer.lora_rank": 8}
# One-digit additions and subtractions in groups of 8, so few groups are dropped for equal scores, at a LoRA
# learning rate. The embedded model samples the right answer ~18 % of the time at temperature 1, but its greedy
# answer to a held-out 1-digit problem is almost never right, so greedy held-out accuracy (evaluated at step 0 and at
# the end, and printed) is floor-bound: most runs move nothing across the argmax. The claim is the log-probability
# the model gives the correct answers of the held-out items, a continuous measure of the same learning.
LEARNING_RUN = {
    "total_steps": 30,
    "digits": 1,
    "group_size": 8,
    "batch_size": 64,
    "steps_per_eval": 30,
    "eval_items": 100,
    "max_num_workers": 4,
    "trainer.learning_rate": 3e-3,
}
# The rise of the held-out answers' mean probability (sized in the test's docstring).
MIN_PROBABILITY_LIFT = 0.03
# Runs of the learning test at most: another seed when the first shows no lift (see the test).
ATTEMPTS = 2
LEARNING_TIMEOUT = 900.0


@pytest.fixture(scope="module")
def skyrl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkyrlServer]:
    server = start_skyrl_server(embedded_base_model_dir(), tmp_path_factory.mktemp("skyrl"))
    yield server
    server.stop()


@pytest.fixture
def on_tinker(skyrl: SkyrlServer, quick_env: None, monkeypatch: pytest.MonkeyPatch) -> SkyrlServer:
    """The selected environment configured to train on the module's SkyRL server."""
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    run(rl_edit_config({**ON_TINKER, "tinker.base_url": skyrl.url}))
    return skyrl


@pytest.fixture(scope="module")
def completed(skyrl: SkyrlServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartResult]:
    """One short run on the module's server, trained to completion (several tests read what it left)."""
    home = tmp_path_factory.mktemp("tinker_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HERMES_NB_HOME", str(home))
        patch.setenv("TINKER_API_KEY", FAKE_KEY)
        run(rl_select_environment("arithmetic"))
        run(rl_load_config(QUICK_TEST_CONFIG))
        run(rl_edit_config({**ON_TINKER, "tinker.base_url": skyrl.url}))
        start = run(rl_start_training(**SHORT_RUN))
        status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)
        assert status.status == "completed", f"{status.error}\n{skyrl.log_tail()}"
        yield start
        for run_id in known_run_ids():
            run(rl_stop_training(run_id))


@pytest.fixture
def completed_home(completed: StartResult, monkeypatch: pytest.MonkeyPatch) -> StartResult:
    """The completed run's home and key, for a test that reads or uses that run."""
    monkeypatch.setenv("HERMES_NB_HOME", str(Path(completed.run_dir).parents[1]))
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    return completed


def test_a_run_on_tinker_completes_with_metrics_and_tinker_checkpoints(completed_home: StartResult) -> None:
    status = run(rl_check_status(completed_home.run_id))

    assert (status.status, status.step) == ("completed", 3)
    assert finite(status.metrics.loss) and finite(status.metrics.reward_mean)
    run_dir = Path(completed_home.run_dir)
    checkpoints = read_checkpoints(run_dir / "checkpoints.jsonl")
    assert [c.step for c in checkpoints] == [2, 3]
    assert all(c.tinker_path and c.tinker_path.startswith("tinker://") for c in checkpoints)
    saved = read_checkpoint(Path(checkpoints[-1].path))
    assert saved is not None and saved.state_path == checkpoints[-1].tinker_path
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # Computed from the logprobs Tinker returned (its own metrics come back empty from SkyRL).
    assert all(r["values"]["train/ratio_mean"] > 0 for r in rows)


def test_status_shows_the_remote_side_without_secrets(completed_home: StartResult, skyrl: SkyrlServer) -> None:
    status = run(rl_check_status(completed_home.run_id))

    info = status.tinker
    assert info is not None
    assert (info.base_model, info.lora_rank, info.base_url) == (str(embedded_base_model_dir()), 8, skyrl.url)
    assert info.tokens_trained > 0 and info.tokens_sampled > 0
    assert f"LoRA rank 8 at {skyrl.url}" in str(status)
    assert FAKE_KEY not in status.model_dump_json()


def test_downloaded_final_weights_load_with_from_pretrained_and_carry_the_training(
    completed_home: StartResult,
) -> None:
    from transformers import AutoModelForCausalLM

    results = run(rl_get_results(completed_home.run_id, download=True))

    assert results.final_weights_path == str(Path(completed_home.run_dir) / "tinker_weights" / "model")
    trained = AutoModelForCausalLM.from_pretrained(results.final_weights_path).state_dict()
    base = AutoModelForCausalLM.from_pretrained(str(embedded_base_model_dir())).state_dict()
    changed = [k for k in base if not (trained[k] == base[k]).all()]
    assert any(".self_attn.q_proj." in k for k in changed), "the merged model equals the base model"


def test_rl_test_inference_samples_the_tinker_checkpoint(completed_home: StartResult) -> None:
    result = run(rl_test_inference(num_steps=2, group_size=2, models=completed_home.run_id))

    (tested,) = result.results
    assert tested.status == "ok", tested.error
    assert tested.completions == 4


# The SDK's clients made in this process keep their connections until they are collected (tinker 0.24.1 has no
# public close), and an unclosed socket warns then, in whichever test is running. The tests that make them do so
# in a helper and collect its garbage before they return, where their own warning filter applies.
SDK_IN_PROCESS = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module", autouse=True)
def sdk_clients_collected() -> Iterator[None]:
    """Last of the module: the SDK's sessions made in this process are closed (each one's heartbeat task holds it,
    so it would otherwise beat, and warn, against its stopped server until the session ends), and what is left of
    those clients is collected here, with their sockets' ResourceWarning ignored, not during the session's end,
    where a warning turned error fails the whole run."""
    yield
    from tinker.lib.internal_client_holder import InternalClientHolder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        # type(), not isinstance(): some objects (torch proxies) warn when their __class__ is read.
        for holder in [obj for obj in gc.get_objects() if issubclass(type(obj), InternalClientHolder)]:
            holder.close()
        gc.collect()


# Transfer runs: one step at a learning rate too small to move a float32 weight, so the run's weights after it are
# the weights it started from.
TRANSFER_RUN = {
    "total_steps": 1,
    "steps_per_eval": 0,
    "trainer.learning_rate": 1e-12,
    "trainer.save_checkpoint_interval": 1,
}


def state_of(model_dir: Path | str) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    return dict(AutoModelForCausalLM.from_pretrained(str(model_dir)).state_dict())


def assert_same_weights_not_the_base(weights: dict[str, Any], source: dict[str, Any]) -> None:
    import torch

    base = state_of(embedded_base_model_dir())
    assert all(torch.allclose(weights[k], source[k], atol=1e-6) for k in source), "the source's weights did not carry"
    changed = [k for k in base if not torch.allclose(source[k], base[k], atol=1e-6)]
    assert any(".self_attn.q_proj." in k for k in changed), "the source equals the base model: nothing to carry"


def local_logprobs(model_dir: Path, data: list[Datum]) -> list[list[float]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        rows = []
        for d in data:
            logits = model(torch.tensor([d.input_tokens_T])).logits[0]
            picked = logits.log_softmax(-1).gather(-1, torch.tensor(d.target_tokens_T)[:, None])
            rows.append(picked[:, 0].tolist())
    return rows


def server_logprobs(server: SkyrlServer, run_dir: Path, checkpoint: str, data: list[Datum]) -> list[list[float]]:
    """``data``'s logprobs under a Tinker checkpoint, computed by the server (a LoRA client that loads it)."""
    return TinkerBackend(backend_config(server, run_dir, init_weights=checkpoint)).forward(data)


@SDK_IN_PROCESS
def test_a_local_run_starts_from_a_tinker_runs_final_weights(completed_home: StartResult, skyrl: SkyrlServer) -> None:
    """The Tinker run's final adapter, downloaded and merged into the base model, is what the local run trains from;
    the merged model computes the logprobs the server computes for that checkpoint."""
    start = run(
        rl_start_training(
            **TRANSFER_RUN,
            **{
                "trainer.backend": "local",
                "trainer.lora_rank": 0,
                "trainer.pretrained_model_path": completed_home.run_id,
            },
        )
    )
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)

    assert status.status == "completed", status.error
    final = read_checkpoints(Path(completed_home.run_dir) / "checkpoints.jsonl")[-1]
    merged = Path(final.path) / "tinker_weights" / "model"
    assert run(rl_get_results(start.run_id)).final_weights_path is not None
    trained_from = state_of(read_checkpoints(Path(start.run_dir) / "checkpoints.jsonl")[-1].path)
    assert_same_weights_not_the_base(trained_from, state_of(merged))
    probe = token_datums(random.Random(11), 2)
    on_server = server_logprobs(skyrl, Path(start.run_dir) / "tinker_probe", final.path, probe)
    gc.collect()
    base_gap = largest_gap(local_logprobs(embedded_base_model_dir(), probe), on_server)
    merged_gap = largest_gap(local_logprobs(merged, probe), on_server)
    print(f"merged model vs server logprobs: {merged_gap:.2e} (base model vs server: {base_gap:.3f})")
    assert merged_gap < 0.01 * base_gap


def test_a_tinker_run_starts_from_an_earlier_tinker_runs_checkpoint(completed_home: StartResult) -> None:
    start = run(rl_start_training(**TRANSFER_RUN, **{"trainer.pretrained_model_path": completed_home.run_id}))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)

    assert status.status == "completed", status.error
    source = run(rl_get_results(completed_home.run_id, download=True)).final_weights_path
    weights = run(rl_get_results(start.run_id, download=True)).final_weights_path
    assert_same_weights_not_the_base(state_of(weights), state_of(source))


def test_a_tinker_run_distils_from_an_earlier_tinker_run_scored_on_the_server(completed_home: StartResult) -> None:
    teacher = {"trainer.teacher_model": completed_home.run_id, "trainer.teacher_kl_coef": 0.5}
    start = run(rl_start_training(**TRANSFER_RUN, **teacher))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)

    assert status.status == "completed", status.error
    kl = [row[TRAIN_TEACHER_KL] for row in run(rl_get_results(start.run_id)).history if TRAIN_TEACHER_KL in row]
    assert kl and all(finite(v) for v in kl), kl


def test_a_tinker_run_refuses_to_start_from_local_weights(completed_home: StartResult) -> None:
    with pytest.raises(
        TransferError, match="trainer.pretrained_model_path: .* holds local weights; a run on the tinker"
    ):
        run(rl_start_training(**TRANSFER_RUN, **{"trainer.pretrained_model_path": str(embedded_base_model_dir())}))


def test_a_missing_key_is_refused_before_the_run_starts(
    on_tinker: SkyrlServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINKER_API_KEY")

    with pytest.raises(TinkerError, match="TINKER_API_KEY: not set"):
        run(rl_start_training(**SHORT_RUN))


def test_an_unknown_base_model_is_refused_listing_what_the_server_offers(on_tinker: SkyrlServer) -> None:
    with pytest.raises(TinkerError, match="offers '") as refused:
        run(rl_start_training(**{**SHORT_RUN, "trainer.base_model": "Qwen/Qwen3-8B"}))

    assert str(embedded_base_model_dir()) in str(refused.value)
    assert FAKE_KEY not in str(refused.value)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"trainer.loss": "cispo"}, "trainer.loss: 'cispo'"),
        ({"trainer.loss_type": "dr_grpo"}, "trainer.loss_type: 'dr_grpo'"),
        ({"trainer.importance_sampling_level": "sequence"}, "trainer.importance_sampling_level: 'sequence'"),
        ({"trainer.importance_sampling_cap": 3.0}, "trainer.importance_sampling_cap"),
        ({"trainer.beta": 0.04}, "trainer.kl_estimator: 'k3'"),
    ],
)
def test_an_algorithm_the_tinker_server_cannot_compute_is_refused_before_the_run_starts(
    on_tinker: SkyrlServer, fields: dict[str, Any], named: str
) -> None:
    before = set(known_run_ids())
    with pytest.raises(TinkerError) as refused:
        run(rl_start_training(**{**SHORT_RUN, **fields}))

    assert named in str(refused.value) and f"the Tinker server at {on_tinker.url}" in str(refused.value)
    assert set(known_run_ids()) == before  # nothing was created


def test_a_kl_penalty_on_tinker_scores_the_base_model_on_the_server_and_logs_a_finite_kl(
    on_tinker: SkyrlServer,
) -> None:
    start = run(rl_start_training(**{**SHORT_RUN, "trainer.beta": 0.05, "trainer.kl_estimator": "k1"}))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)
    assert status.status == "completed", f"{status.error}\n{on_tinker.log_tail()}"

    kl = [row[TRAIN_KL] for row in run(rl_get_results(start.run_id)).history if TRAIN_KL in row]
    assert kl and all(finite(v) for v in kl), kl
    # Step 1 samples the base model, which is the reference: the sampler's and the server's scoring of the same
    # tokens agree to rounding, so the KL sample is ~0 there.
    assert abs(kl[0]) < 0.05, kl


def test_a_stopped_run_on_tinker_resumes_its_steps_and_optimizer(on_tinker: SkyrlServer) -> None:
    """The run level: steps and history continue. That the Adam moments come back with the weights is shown on the
    server itself by ``test_resume_restores_the_adam_moments_on_the_server``."""
    first = run(rl_start_training(total_steps=200, steps_per_eval=0))
    wait_for_status(first.run_id, lambda s: s.step >= 2, RUN_TIMEOUT)
    stopped = run(rl_stop_training(first.run_id))
    assert stopped.status == "stopped"
    last = read_checkpoints(Path(first.run_dir) / "checkpoints.jsonl")[-1]
    # A stop that lands on an interval step leaves that step's interval checkpoint as the last one.
    assert last.kind in ("stop", "interval") and last.tinker_path is not None
    assert last.step == run(rl_get_results(first.run_id)).history[-1]["step"]

    resumed = run(rl_start_training(resume_from=first.run_id, total_steps=last.step + 2))
    status = wait_for_status(resumed.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)

    assert status.status == "completed", f"{status.error}\n{on_tinker.log_tail()}"
    own = [json.loads(line)["step"] for line in (Path(resumed.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert own == [last.step + 1, last.step + 2]
    trainer_log = Path(resumed.logs["trainer"]).read_text()
    assert f"resumed from {last.path}" in trainer_log
    history = [row["step"] for row in run(rl_get_results(resumed.run_id)).history]
    assert history == list(range(1, last.step + 3))


# The optimizer-state test: steps before the checkpoint (Adam's moments carry their history), the step after it.
STEPS_BEFORE_SAVE = 3
ADAM = AdamParams(learning_rate=1e-2, max_grad_norm=0.0)
# Adam's update from fresh moments (zero, step count 0) is m_hat / (sqrt(v_hat) + eps) with m_hat = g and
# v_hat = g^2: exactly the update of Adam with beta1 = beta2 = 0, whatever moments it holds. SkyRL 0.3.0 restores
# the moments on load_state too (it ignores the SDK's optimizer flag), so this is how the test makes the step a
# weights-only restore would make, to show that the comparison below tells the two apart.
ADAM_WITHOUT_HISTORY = ADAM.model_copy(update={"beta1": 0.0, "beta2": 0.0})


def token_datums(rng: random.Random, count: int) -> list[Datum]:
    """``count`` sequences of 12 tokens (6 prompt, 6 trained), advantages of both signs; one shape, one JIT."""
    data = []
    for i in range(count):
        tokens = [rng.randrange(3, 100) for _ in range(12)]
        data.append(
            Datum(
                input_tokens_T=tokens[:-1],
                target_tokens_T=tokens[1:],
                weights_T=[0.0] * 5 + [1.0] * 6,
                sampling_logprobs_T=[-4.0] * 11,
                advantages_T=[1.0 if i % 2 == 0 else -1.0] * 11,
            )
        )
    return data


def backend_config(server: SkyrlServer, run_dir: Path, **infra: object) -> RunConfig:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = RunConfig.model_validate(
        {"trainer": {"backend": "tinker", "lora_rank": 8}, "tinker": {"base_url": server.url}}
    )
    return config.model_copy(update={"infra": config.infra.model_copy(update={"run_dir": str(run_dir), **infra})})


def train_on(backend: TinkerBackend, batches: list[list[Datum]], adam: AdamParams) -> None:
    for batch in batches:
        backend.forward_backward(batch, "importance_sampling")
        backend.optim_step(adam)


def largest_gap(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for row_a, row_b in zip(a, b, strict=True) for x, y in zip(row_a, row_b, strict=True))


def after_updates(server: SkyrlServer, tmp_path: Path) -> dict[str, list[list[float]]]:
    """The probe's logprobs at the checkpoint and after one more step, on three LoRA clients given the same batches:
    never stopped; restored from its checkpoint through hermes-nb's resume path (``trainer.main.restore``); and the
    same restore followed by the update fresh moments make."""
    rng = random.Random(7)
    batches = [token_datums(rng, 2) for _ in range(STEPS_BEFORE_SAVE + 1)]
    probe = token_datums(rng, 2)
    never_stopped = TinkerBackend(backend_config(server, tmp_path / "a"))
    train_on(never_stopped, batches[:STEPS_BEFORE_SAVE], ADAM)
    logprobs = {"at save": never_stopped.forward(probe)}
    saved = save_checkpoint(never_stopped, backend_config(server, tmp_path / "a"), tmp_path / "a", 3, "stop")
    train_on(never_stopped, batches[STEPS_BEFORE_SAVE:], ADAM)
    logprobs["never stopped"] = never_stopped.forward(probe)
    for name, adam in (("resumed", ADAM), ("fresh moments", ADAM_WITHOUT_HISTORY)):
        config = backend_config(server, tmp_path / name, resume_checkpoint=saved.path, start_step=STEPS_BEFORE_SAVE)
        backend = TinkerBackend(config)
        assert restore(backend, config) == STEPS_BEFORE_SAVE
        logprobs[f"{name} at restore"] = backend.forward(probe)
        train_on(backend, batches[STEPS_BEFORE_SAVE:], adam)
        logprobs[name] = backend.forward(probe)
    return logprobs


@SDK_IN_PROCESS
def test_resume_restores_the_adam_moments_on_the_server(
    skyrl: SkyrlServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the restore, the resumed client's next update matches the never-stopped client's; the update of fresh
    moments does not, which shows the comparison can tell."""
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    logprobs = after_updates(skyrl, tmp_path)
    gc.collect()

    expected, at_save = logprobs["never stopped"], logprobs["at save"]
    assert largest_gap(logprobs["resumed at restore"], at_save) < 1e-5, "the restored weights differ"
    assert largest_gap(logprobs["fresh moments at restore"], at_save) < 1e-5, "the restored weights differ"
    moved = largest_gap(expected, at_save)
    resumed, fresh = largest_gap(logprobs["resumed"], expected), largest_gap(logprobs["fresh moments"], expected)
    print(f"update moved logprobs by {moved:.4f}; resumed off by {resumed:.2e}, fresh moments off by {fresh:.4f}")
    assert fresh > 0.1 * moved, "fresh moments would not show: the comparison cannot tell"
    assert resumed < 1e-3 * moved


# Four to eight minutes, and one seed in two read no lift on 2026-12-02 (0.052 -> 0.036, 0.056 -> 0.061): run by
# `make test-learning`, not in the default suite.
@pytest.mark.learning_long
@pytest.mark.timeout(START_TIMEOUT_S + ATTEMPTS * LEARNING_TIMEOUT + 60)
@SDK_IN_PROCESS
def test_held_out_answer_probability_rises_on_arithmetic_within_a_short_run(on_tinker: SkyrlServer) -> None:
    """The held-out items' correct completions (the answer and its end) are likelier under the run's final weights
    than under the base model, by MIN_PROBABILITY_LIFT in mean probability; both scored teacher-forced on the server.

    That mean is the expected reward of a sample at temperature 1 on the held-out items, computed rather than
    sampled, so it is continuous and carries no sampling noise. Measured 2026-12-02, seed 0: 0.052 -> 0.189 (load
    2-34 on two cores; greedy accuracy 0.00 -> 0.19) and 0.052 -> 0.182 (a quiet machine, 4 min 52 s with the
    server's start; greedy 0.00 -> 0.18); earlier runs of seed 0 read greedy 0.08 and 0.10 (training is not bitwise
    reproducible under load). The mean logprob of the answer digits alone does not follow (-2.41 -> -4.80, -3.98,
    -4.87 in three runs, -2.41 in the quiet one): the reward is learned mostly as stopping after the answer, and
    sharpening pushes the wrong items' answers down, so that measure is printed, not asserted. The bar is under a
    quarter of the two measured lifts (0.137, 0.130); it is not yet sized from a spread of seeds, so a run that
    misses it gets one more of its own seed. Where nothing is learned the weights do not move and the lift is
    exactly 0, so the second run costs no soundness.
    """
    shown: list[str] = []
    for seed in range(ATTEMPTS):
        run_dir = learning_run(on_tinker, seed=seed)
        scores = answer_scores(on_tinker, run_dir)
        gc.collect()
        shown.append(
            f"seed {seed}: held-out answers: base {scores['base']}; final {scores['final']}; greedy held-out "
            f"accuracy by step {eval_accuracy(run_dir)}; sampled reward by step {env_rewards(run_dir)}"
        )
        print(shown[-1])
        if scores["final"].probability - scores["base"].probability >= MIN_PROBABILITY_LIFT:
            return
    pytest.fail("no run showed the lift:\n" + "\n".join(shown))


class AnswerScores(NamedTuple):
    """One set of weights' scores of the held-out items' correct answers (teacher-forced, after each prompt)."""

    # The mean over the items of the chance of sampling exactly the answer and its end (EOS or a newline).
    probability: float
    # The mean over the items of the mean logprob of the answer's tokens.
    logprob: float

    def __str__(self) -> str:
        return f"answer probability {self.probability:.4f}, answer token logprob {self.logprob:.3f}"


def answer_scores(server: SkyrlServer, run_dir: Path) -> dict[str, AnswerScores]:
    """The run's held-out items (its environment, built from its final checkpoint's config, so its ``env.seed``),
    scored by ``SamplingClient.compute_logprobs`` under the base model and under the final checkpoint's weights."""
    import tinker
    from transformers import AutoTokenizer

    final = Path(read_checkpoints(run_dir / "checkpoints.jsonl")[-1].path)
    saved = read_checkpoint(final)
    assert saved is not None and saved.sampler_path, f"{final} names no sampler weights"
    config = RunConfig.load(final / CONFIG_FILE)
    assert config.environment is not None
    env = make_env(load_env_class(config.environment.file), config)
    assert isinstance(env, GeneratedItems), f"{config.environment.name} has no generated held-out items"
    tokenizer = AutoTokenizer.from_pretrained(str(final))
    # The prompt as the inference server encodes a completion request's; the answer's tokens after it.
    pairs = [
        (tokenizer.encode(i.prompt), tokenizer.encode(i.answer, add_special_tokens=False)) for i in env.eval_items()
    ]
    service = tinker.ServiceClient(base_url=server.url, api_key=FAKE_KEY)
    clients = {
        "base": service.create_sampling_client(base_model=saved.base_model),
        "final": service.create_sampling_client(model_path=saved.sampler_path),
    }
    # A completion is correct when the answer is followed by its end: the end-of-sequence token or a newline.
    ends = [[tokenizer.eos_token_id], tokenizer.encode("\n", add_special_tokens=False)]
    scores = {}
    for name, client in clients.items():
        answers = [answer_logprobs(client, p, a + end) for p, a in pairs for end in ends]
        completed = [sum(row) for row in answers]
        scores[name] = AnswerScores(
            probability=sum(math.exp(v) for v in completed) / len(pairs),
            logprob=sum(sum(row[: len(a)]) / len(a) for row, (_, a) in zip(answers[:: len(ends)], pairs, strict=True))
            / len(pairs),
        )
    return scores


def answer_logprobs(client: Any, prompt: list[int], answer: list[int]) -> list[float]:
    """The logprobs of ``answer``'s tokens after ``prompt``, computed by the server."""
    import tinker

    values = client.compute_logprobs(tinker.ModelInput.from_ints(prompt + answer)).result()
    # The answer's tokens end the sequence: its last values, whether the server leaves the first token out
    # (SkyRL 0.3.0 does) or answers it with None (the SDK's docstring).
    scored = [v for v in values[-len(answer) :] if v is not None]
    assert len(scored) == len(answer), f"the server left answer tokens unscored: {values}"
    return scored


def learning_run(server: SkyrlServer, seed: int) -> Path:
    start = run(rl_start_training(**LEARNING_RUN, **{"env.seed": seed, "trainer.seed": seed}))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, LEARNING_TIMEOUT)
    assert status.status == "completed", f"{status.error}\n{server.log_tail()}"
    return Path(start.run_dir)


def env_rows(run_dir: Path, key: str) -> dict[int, float]:
    """``key`` of each step's row of the environment's metrics."""
    by_step: dict[int, float] = {}
    for line in (run_dir / "env_metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if key in row["values"]:
            by_step[row["step"]] = row["values"][key]
    return dict(sorted(by_step.items()))


def eval_accuracy(run_dir: Path) -> dict[int, float]:
    return env_rows(run_dir, EVAL_PERCENT_CORRECT)


def env_rewards(run_dir: Path) -> list[float]:
    """The environment's env/reward_mean of each step (every completion it sampled, not only the trained ones)."""
    return [round(v, 3) for v in env_rows(run_dir, "env/reward_mean").values()]


# A server that stays away fails the run after this; the default (300 s) leaves room for a hosted service's restart.
GIVE_UP_S = 20.0
# Past the give-up bound: the call in flight when the server died, the trainer's exit and the supervisor's report.
FAILURE_MARGIN_S = 60.0


def test_a_server_that_dies_mid_run_fails_the_run_naming_tinker_and_the_last_error(
    quick_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SkyRL server of its own, SIGKILLed (its whole process group) once the run has trained and saved a step."""
    server = start_skyrl_server(embedded_base_model_dir(), tmp_path / "skyrl_dying")
    try:
        monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
        run(rl_edit_config({**ON_TINKER, "tinker.base_url": server.url, "tinker.give_up_after_s": GIVE_UP_S}))
        start = run(rl_start_training(total_steps=200, steps_per_eval=0, **{"trainer.save_checkpoint_interval": 1}))
        index = Path(start.run_dir) / "checkpoints.jsonl"
        trained = wait_for_status(start.run_id, lambda s: s.is_terminal or bool(read_checkpoints(index)), RUN_TIMEOUT)
        assert trained.status == "running", f"{trained}\n{server.log_tail()}"
        pids = list(run_pids(start.run_id).values())
        os.killpg(server.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        status = wait_for_status(start.run_id, lambda s: s.is_terminal, GIVE_UP_S + FAILURE_MARGIN_S)
        took = time.monotonic() - killed
    finally:
        server.stop()

    print(f"failed {took:.1f} s after the kill: {status.error}; tinker: {status.tinker}")
    assert status.status == "failed", str(status)
    assert status.error is not None and "Tinker server at" in status.error and "last error" in status.error
    assert status.tinker is not None and status.tinker.retries > 0 and status.tinker.last_error
    run_dir = Path(start.run_dir)
    checkpoints = read_checkpoints(run_dir / "checkpoints.jsonl")
    assert checkpoints and checkpoints[-1].step >= 1 and read_checkpoint(Path(checkpoints[-1].path)) is not None
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and steps[-1] >= checkpoints[-1].step
    assert alive_after(pids, 10.0) == []
