"""The environment process of a verifiers run: verifiers plays the episodes, hermes-nb trains their exact tokens.

``python -m hermes_nb.env_host serve <this file>:VerifiersEnv --config <run>/config.yaml`` in the verifiers
Python. ``setup`` loads the environment of the file named by ``FILE_VAR`` as verifiers loads one
(``vf.load_environment(vf.resolve_env_config(...))``: the taskset by its id, its own fields from the settings'
``taskset.*``), with local defaults (the ``subprocess`` runtime and the settings' harness: ``hermes_nb_chat``, the
``null`` harness's chat loop in this process, or ``null`` itself, whose chat program ``chat_program`` prepares
first; verifiers' own defaults are a remote sandbox and a shell-giving harness), and holds ``env.serving()`` (its
interception server) until ``teardown``. An item is one of the taskset's tasks, in its order,
over and over. A group is ``group_size`` episodes of it (``env.run_slot``), sampled through verifiers' **train**
client from the run's inference server's ``/inference/v1/generate``: the client renders the chat to token ids
itself, so each trace's branch carries the exact ``token_ids``, ``sampled_mask`` and ``logprobs`` the server
sampled, and those are what is trained. The score is the trace's reward (the weighted sum of its ``@vf.reward``s);
its ``@vf.metric``s are reported as ``verifiers/<name>`` in ``env_metrics.jsonl``. An episode that failed (a reward
or setup that raised, a harness that could not start) fails the group with verifiers' own message.
``rl_test_inference`` against an endpoint (``CLIENT_VAR=eval``) samples through verifiers' eval client instead: text
only, for testing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

from hermes_nb.config import BaseEnvConfig, base_model_dir
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.scoring import TrainedSequence
from hermes_nb.errors import HermesNBError
from hermes_nb.frameworks.verifiers import chat_program
from hermes_nb.frameworks.verifiers.handoff import CLIENT_VAR, FILE_VAR, HELD_OUT_SPLIT, SPLIT_FIELD, taskset_id
from hermes_nb.frameworks.verifiers.plugins import PLUGINS_DIR
from hermes_nb.frameworks.verifiers.schema_child import has_held_out_split
from hermes_nb.frameworks.verifiers.settings import VerifiersSettings
from hermes_nb.protocol.metrics import ENV_TURNS_MEAN, EVAL_FAILED_EPISODES, EVAL_PERCENT_CORRECT
from hermes_nb.protocol.trajectory import MASK_IGNORE, PROMPT_LOGPROB, Message, ScoredDataGroup

# Where every episode runs: on this machine, never in a remote sandbox.
RUNTIME = {"type": "subprocess"}
# A variable no one sets: the client's key when the server needs none (verifiers then sends "EMPTY").
NO_KEY_VAR = "HERMES_NB_VERIFIERS_NO_KEY"
METRIC_PREFIX = "verifiers/"

logger = logging.getLogger(__name__)


class VerifiersEpisodeError(HermesNBError):
    """A verifiers episode failed (its taskset's setup or reward raised, its harness could not run)."""


class VerifiersEnv(BaseEnv):
    name = "verifiers"
    env_config_cls: ClassVar[type[BaseEnvConfig]] = VerifiersSettings
    config: VerifiersSettings

    env: Any = None
    eval_env: Any = None
    stack: contextlib.AsyncExitStack | None = None  # the environments' ``serving()``, held from setup to teardown
    evaluations = 0  # started so far

    async def setup(self) -> None:
        file = os.environ.get(FILE_VAR, "")
        if not file:
            raise HermesNBError(f"{FILE_VAR} names no verifiers environment file")
        self.taskset_id, folder = taskset_id(file)
        # verifiers imports a harness by a top-level module name: hermes_nb_chat lives in PLUGINS_DIR.
        sys.path[:0] = [str(folder), str(PLUGINS_DIR)]
        # verifiers starts a taskset's tool servers as `python -m <the environment's module>`: they import it too.
        paths = (str(folder), str(PLUGINS_DIR), os.environ.get("PYTHONPATH", ""))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        _check_tool_parser(self.config.tool_parser)
        if self.config.harness == chat_program.HARNESS_ID:
            await chat_program.prepare()  # the episodes' uv program: one clear error now rather than one per group
        from hermes_nb.frameworks.verifiers import in_process_harness  # verifiers' own imports: this Python only

        self.stack = stack = contextlib.AsyncExitStack()
        # First in, so last out: after every episode the environments' serving() ends.
        stack.push_async_callback(in_process_harness.close_shared_session)
        self.env = await self._served(stack, self.config.taskset_fields())
        eval_fields = self.eval_fields()
        if eval_fields is not None:
            self.eval_env = await self._served(stack, eval_fields)
        self.tasks = _cycle(self.env.taskset)
        self.metrics: dict[str, list[float]] = {}
        self.episode_turns: list[int] = []  # one entry per training episode since the last row

    @functools.cached_property
    def first_evaluation_over(self) -> asyncio.Event:
        """Set except while the first evaluation runs. The host runs that one alongside the first groups
        (env_host/evaluation.py), and a batch of them lets the trainer step; verifiers' held-out episodes are slow
        (each its own requests through the interception server: 130 s for 100 calculator items on a loaded
        machine), so it straddled the first steps and credited them to step 0. The groups wait for it instead,
        as they wait for every later one (`process` never evaluates: nothing waits there)."""
        over = asyncio.Event()
        over.set()
        return over

    async def teardown(self) -> None:
        # Closed here, in setup's task: left to the loop's shutdown, verifiers' serving() fails to close.
        if self.stack is not None:
            await self.stack.aclose()

    def eval_fields(self) -> dict[str, Any] | None:
        """The taskset fields of the held-out evaluation: the settings' ``eval_taskset``, else the held-out split
        where the taskset's config has one; ``None`` (no evaluation, said once in the log) otherwise."""
        fields = self.config.taskset_fields()
        if self.config.eval_taskset is not None:
            return {**fields, **self.config.eval_taskset}
        if has_held_out_split(self.taskset_id):
            return {**fields, SPLIT_FIELD: HELD_OUT_SPLIT}
        logger.warning(
            "no held-out evaluation: the taskset %s has no %s field accepting %r and env.eval_taskset is not set "
            "(the taskset fields of its held-out tasks); evaluations report no accuracy",
            self.taskset_id, SPLIT_FIELD, HELD_OUT_SPLIT,
        )  # fmt: skip
        return None

    async def _served(self, stack: contextlib.AsyncExitStack, taskset_fields: dict[str, Any]) -> Any:
        import verifiers.v1 as vf

        harness = {"id": self.config.harness}
        agent: dict[str, Any] = {"harness": harness, "runtime": RUNTIME, "max_turns": self.config.max_turns}
        config = vf.resolve_env_config({"taskset": {**taskset_fields, "id": self.taskset_id}, "agent": agent})
        env = vf.load_environment(config)
        await stack.enter_async_context(env.serving())
        return env

    def context(self, temperature: float) -> Any:
        """The model of every episode: the run's inference server, through the train client (or the eval client
        for an endpoint that answers text only)."""
        import verifiers.v1 as vf

        server = self.server_configs[0]
        client_fields = {"base_url": server.base_url, "api_key_var": server.api_key_env or NO_KEY_VAR}
        if os.environ.get(CLIENT_VAR, "train") == "eval":
            client: Any = vf.EvalClientConfig(**client_fields)
        else:
            client = vf.TrainClientConfig(
                **client_fields, renderer_model_name=str(base_model_dir(self.config.tokenizer_name)),
                renderer=self.renderer(),
            )  # fmt: skip
        sampling = vf.SamplingConfig(temperature=temperature, max_tokens=self.config.max_tokens)
        return vf.ModelContext(model=server.model_name, client=client, sampling=sampling)

    def renderer(self) -> Any:
        """The train client's renderer: the chat template with ``tool_parser`` reading the model's tool calls
        (none: verifiers picks one by model name, its default refusing tools)."""
        if self.config.tool_parser is None:
            return None
        from renderers import DefaultRendererConfig

        return DefaultRendererConfig(tool_parser=self.config.tool_parser)

    async def get_next_item(self) -> Any:
        return next(self.tasks)

    async def episodes(self, env: Any, task: Any, n: int, temperature: float) -> list[Any]:
        """``n`` finished episodes of ``task``; ``VerifiersEpisodeError`` with verifiers' message when one failed."""
        context = self.context(temperature)
        episodes = await asyncio.gather(*(env.run_slot(slot, context) for slot in env.slots(task, n)))
        for episode in episodes:
            problem = _failure(episode)
            if problem is not None:
                raise VerifiersEpisodeError(f"verifiers episode of task {task.data.idx} ({self.taskset_id}): {problem}")
        return list(episodes)

    async def collect_trajectories(self, item: Any) -> tuple[ScoredDataGroup | None, list[Any]]:
        await self.first_evaluation_over.wait()
        episodes = await self.episodes(self.env, item, self.config.group_size, self.config.temperature)
        traces = [episode.traces[-1] for episode in episodes]
        self.episode_turns.extend(trace.num_turns for trace in traces)
        for trace in traces:
            for name, value in trace.metrics.items():
                if value is not None:
                    self.metrics.setdefault(name, []).append(float(value))
        members = [trained_sequence(trace) for trace in traces]
        group = self.scored_group(members, [float(trace.reward) for trace in traces])
        if group is None:
            return None, []
        messages_G = [[_message(m) for m in trace.messages] for trace in traces]
        return group.model_copy(update={"messages": messages_G}), []

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        self.evaluations += 1
        if self.evaluations == 1:
            self.first_evaluation_over.clear()  # before any await: the first groups are not yet playing
        try:
            return await self._evaluate()
        finally:
            self.first_evaluation_over.set()

    async def _evaluate(self) -> dict[str, float]:
        if self.eval_env is None:
            return {}
        tasks = list(_first(self.eval_env.taskset, self.config.eval_items))
        limit = asyncio.Semaphore(self.config.max_eval_workers)

        async def greedy(task: Any) -> bool:
            async with limit:
                [episode] = await self.episodes(self.eval_env, task, 1, temperature=0.0)
            return self.is_correct(float(episode.traces[-1].reward))

        outcomes = await asyncio.gather(*(greedy(task) for task in tasks), return_exceptions=True)
        return _eval_results(outcomes)

    async def wandb_log(self, wandb_metrics: dict[str, float] | None = None) -> dict[str, float]:
        metrics = dict(wandb_metrics or {})
        for name, values in self.metrics.items():
            metrics[f"{METRIC_PREFIX}{name}"] = sum(values) / len(values)
        self.metrics = {}
        if self.episode_turns:
            metrics[ENV_TURNS_MEAN] = sum(self.episode_turns) / len(self.episode_turns)
            self.episode_turns = []
        return metrics


def trained_sequence(trace: Any) -> TrainedSequence:
    """A trace's one branch as the trainer gets it: its token ids, the sampled ones trained on with their
    sampling logprobs (the server's, carried by the train client), the rest masked. The eval client's trace
    carries no token ids: its member is empty and test-only (scored by ``rl_test_inference``, never trained; the
    group's messages carry the text)."""
    branches = [branch for branch in trace.branches if branch.trainable]
    if len(branches) != 1:
        raise VerifiersEpisodeError(
            f"a verifiers trace with {len(branches)} trainable branches (compaction, subagents) is not supported "
            "yet; one branch per episode is"
        )
    [branch] = branches
    tokens_T, sampled_T, logprobs_T = branch.token_ids, branch.sampled_mask, branch.logprobs
    return TrainedSequence(
        tokens_T=list(tokens_T),
        masks_T=[t if s else MASK_IGNORE for t, s in zip(tokens_T, sampled_T, strict=True)],
        logprobs_T=[lp if s else PROMPT_LOGPROB for lp, s in zip(logprobs_T, sampled_T, strict=True)],
        test_only=os.environ.get(CLIENT_VAR, "train") == "eval",
        truncated=bool(trace.is_truncated),
    )


def _check_tool_parser(name: str | None) -> None:
    """Refuse a ``tool_parser`` renderers does not have now, rather than in every episode's first turn."""
    from renderers.parsers import TOOL_PARSERS

    if name is not None and name not in TOOL_PARSERS:
        accepted = ", ".join(sorted(TOOL_PARSERS))
        raise HermesNBError(f"env.tool_parser: {name!r} is not a renderers tool parser; accepted: {accepted}, or none")


def _failure(episode: Any) -> str | None:
    """What went wrong in a finished episode, in verifiers' words; ``None`` when nothing did."""
    errors = [*episode.errors, *(e for trace in episode.traces for e in trace.errors)]
    if errors:
        last = errors[-1]
        return f"{last.type}: {last.message}"
    if not episode.traces:
        return "it ran no agent"
    if not episode.ok:
        return f"it did not complete (stop condition {episode.traces[-1].stop_condition})"
    return None


def _message(message: Any) -> Message:
    """A trace message as the rollout viewer reads one: its text, and an assistant's tool calls in OpenAI's shape."""
    content = message.content if isinstance(message.content, str) or message.content is None else str(message.content)
    calls = getattr(message, "tool_calls", None) or []
    if not calls:
        return Message(role=message.role, content=content)
    tool_calls = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in calls
    ]
    return Message(role=message.role, content=content, tool_calls=tool_calls)


def _cycle(taskset: Any) -> Iterator[Any]:
    """The taskset's tasks in its order, again from the start when it ends."""
    while True:
        empty = True
        for task in taskset:
            empty = False
            yield task
        if empty:
            raise HermesNBError("the verifiers taskset loaded no tasks")


def _first(taskset: Any, n: int) -> Iterator[Any]:
    for k, task in enumerate(taskset):
        if k >= n:
            return
        yield task


def _eval_results(outcomes: list[bool | BaseException]) -> dict[str, float]:
    """Held-out accuracy over every evaluated task, a failed episode counted as wrong (and counted), as
    ``AgentEnv`` counts it; raises when every one failed, since nothing was measured."""
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    for error in errors:
        if not isinstance(error, Exception):
            raise error  # cancelled: the evaluation is being stopped
    if not outcomes:
        return {}
    if len(errors) == len(outcomes):
        raise errors[0]
    if errors:
        logger.warning("%d of %d evaluation episodes failed (counted as wrong); the first: %s",
                       len(errors), len(outcomes), errors[0])  # fmt: skip
    correct = sum(o is True for o in outcomes)
    return {EVAL_PERCENT_CORRECT: correct / len(outcomes), EVAL_FAILED_EPISODES: float(len(errors))}
