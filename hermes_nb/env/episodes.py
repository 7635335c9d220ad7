"""``Episode``: one multi-turn conversation kept as the exact token ids the policy was shown and sampled.

The transcript is only ever appended to, so every prompt sent is a prefix of the sequence finally trained on:

- the first prompt is the chat template's rendering of the initial messages (with the tools) and the
  assistant's opening (``add_generation_prompt``), encoded once;
- an assistant turn appends its sampled ids exactly as sampled (ending with eos when the model stopped), with
  their sampling logprobs: these are the only trained tokens;
- ``add`` appends the template's text from the end of the last assistant turn to the next assistant opening:
  what the template writes after that turn's eos (the ``"\\n"`` after ``<|im_end|>``) and the rendering of the
  new messages (tool results, a user's reply). It is ``render(all, add_generation_prompt=True)`` minus
  ``render(up to that turn)`` as strings, encoded; earlier text is never encoded again. A template that rewrites
  earlier turns has no such difference (``TemplateNotPrefixStable``).

Each ``ask`` sends the whole transcript as a token-id prompt (``ServerManager.sample_tokens``); ``ask_all`` asks
for several episodes at once, and episodes with the same transcript (a group's first turn) share one request
with ``n`` samples. A turn that ends without eos (cut by its token budget) ends the episode, ``truncated``;
so does a transcript that leaves no room under ``max_token_length`` (no request ever asks past it). An endpoint
that answers with text only (a hosted model behind ``rl_test_inference``'s gateway) is asked through
``/v1/chat/completions`` with the messages instead; the transcript is then the template's reading of the answers
and the episode is ``test_only``: it can be scored and looked at, never trained on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from hermes_nb.env.chat_render import ChatRenderer, ChatTemplateError
from hermes_nb.env.scoring import TrainedSequence
from hermes_nb.env.types import SampledCompletion
from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.inference import ChatChoice, ChatMessage, ToolSpec
from hermes_nb.protocol.tool_calls import parse_tool_calls
from hermes_nb.protocol.trajectory import MASK_IGNORE, PROMPT_LOGPROB

if TYPE_CHECKING:
    # The client module imports httpx: the functions that need its errors import it when they run, so that
    # ``import hermes_nb.env`` stays light (environment files import it to be listed).
    from hermes_nb.env.inference_client import InferenceRequestRefused, ServerManager

# Characters of each side shown when a template turns out not to be prefix-stable.
DIFF_CONTEXT_CHARS = 40


class TurnSettings(NamedTuple):
    """How one request samples a turn."""

    max_tokens: int
    temperature: float
    top_p: float


class EpisodeError(HermesNBError):
    """An episode cannot take this step: it has ended, or its first prompt does not fit ``max_token_length``."""


class TemplateNotPrefixStable(ChatTemplateError):
    """The chat template renders an earlier turn differently once later turns follow, so no token transcript
    can be extended by appending; the message names the template and where the renderings part."""


class Episode:
    """One conversation as exact tokens. ``messages``: the conversation (assistant turns parsed for tool calls);
    ``tokens``/``masks``/``logprobs``: the sequence to train on, up to the end of the last assistant turn."""

    def __init__(
        self,
        server: ServerManager,
        renderer: ChatRenderer,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        *,
        tools: Sequence[ToolSpec] | None = None,
        max_token_length: int,
        max_turns: int | None = None,
    ) -> None:
        self.server = server
        self.renderer = renderer
        self.tools = list(tools or [])
        self.max_token_length = max_token_length
        self.max_turns = max_turns
        self.messages: list[ChatMessage] = []
        self.turns = 0  # assistant turns sampled
        self.truncated = False  # a turn ended without eos, or no room is left for another
        self.test_only = False  # asked through chat: the tokens are a reading of text, not what was sampled
        self.policy_versions: list[int] = []  # of the weights that sampled each turn, where the server said
        self._tokens: list[int] = []  # the whole transcript: the trained part, then the next prompt's tail
        self._masks: list[int] = []
        self._logprobs: list[float] = []
        self._exact_logprobs = True  # every sampled turn came with its logprobs
        self._trained_end = 0  # end of the last assistant turn in _tokens
        self._anchor = 0  # messages[:_anchor] end with the last assistant turn ...
        self._anchor_text = ""  # ... and render to this
        self._tail = ""  # what the template writes after that turn's eos
        self._prompt_text = ""  # the rendering of every message plus the assistant's opening
        self.add(*messages)

    # ---- the conversation ------------------------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        return self._tokens[: self._trained_end]

    @property
    def masks(self) -> list[int]:
        """The token id where the policy sampled the token (trained on), ``MASK_IGNORE`` elsewhere."""
        return self._masks[: self._trained_end]

    @property
    def logprobs(self) -> list[float] | None:
        """Each sampled token's sampling logprob, ``PROMPT_LOGPROB`` elsewhere; ``None`` when the endpoint sent none."""
        return self._logprobs[: self._trained_end] if self._exact_logprobs else None

    @property
    def prompt_ids(self) -> list[int]:
        """What the next ``ask`` sends: the transcript up to the assistant's opening."""
        return list(self._tokens)

    @property
    def final_answer(self) -> str | None:
        """The content of the last assistant turn when it made no tool call and ended (eos), else None."""
        if not self.messages or self.messages[-1].role != "assistant" or self.truncated:
            return None
        last = self.messages[-1]
        return None if last.tool_calls else (last.content or "")

    @property
    def turn_limit_reached(self) -> bool:
        """``max_turns`` turns were taken and the last one still called tools: no answer came in time."""
        last = self.messages[-1] if self.messages else None
        at_limit = self.max_turns is not None and self.turns >= self.max_turns
        return at_limit and not self.truncated and last is not None and bool(last.tool_calls)

    @property
    def can_ask(self) -> bool:
        """Whether another assistant turn may be sampled now."""
        waiting = self._anchor < len(self.messages)  # something was added since the last assistant turn
        under_limit = self.max_turns is None or self.turns < self.max_turns
        return waiting and under_limit and not self.truncated

    def trained_sequence(self) -> TrainedSequence:
        """This episode as a member of a scored group (``BaseEnv.scored_group``)."""
        return TrainedSequence(
            tokens_T=self.tokens,
            masks_T=self.masks,
            logprobs_T=self.logprobs,
            test_only=self.test_only,
            truncated=self.truncated,
        )

    def add(self, *messages: ChatMessage | Mapping[str, Any]) -> None:
        """Append tool results or user turns: the template's text up to the next assistant opening, masked."""
        if self.truncated and self.turns:
            raise EpisodeError("add: the episode has ended (its last turn was cut, or no room is left)")
        added = [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in messages]
        rendered = self.renderer.render([*self.messages, *added], self.tools, add_generation_prompt=True)
        _check_prefix(self.renderer, self._anchor_text, rendered)
        new_ids = self.renderer.encode(self._tail + rendered[len(self._anchor_text) :])
        # Checked and encoded before anything changes: a refused add leaves the episode as it was.
        self.messages += added
        # Only the text after the last sampled turn is replaced: nothing sampled or sent is ever re-encoded.
        del self._tokens[self._trained_end :], self._masks[self._trained_end :], self._logprobs[self._trained_end :]
        self._tokens += new_ids
        self._masks += [MASK_IGNORE] * len(new_ids)
        self._logprobs += [PROMPT_LOGPROB] * len(new_ids)
        self._prompt_text = rendered
        if len(self._tokens) >= self.max_token_length:
            self.truncated = True  # not even one token would fit: the episode ends here

    async def ask(self, *, max_tokens: int, temperature: float, top_p: float = 1.0) -> ChatMessage:
        """Sample the next assistant turn (at most ``max_tokens``, less where ``max_token_length`` is near) and
        return it with its tool calls parsed (``hermes_nb.protocol.tool_calls``)."""
        [message] = await ask_all([self], max_tokens=max_tokens, temperature=temperature, top_p=top_p)
        return message

    # ---- taking a turn ---------------------------------------------------------------------------------------
    def _check_can_ask(self) -> None:
        if self.truncated and not self.turns:
            raise EpisodeError(
                f"max_token_length: the first prompt has {len(self._tokens)} tokens and leaves no room for an answer "
                f"under max_token_length = {self.max_token_length}; raise it"
            )
        if not self.can_ask:
            raise EpisodeError(
                "ask: this episode cannot take another turn (it ended, reached max_turns, or nothing was added "
                "since its last turn)"
            )

    def _turn_tokens(self, max_tokens: int) -> int:
        return max(1, min(max_tokens, self.max_token_length - len(self._tokens)))

    def _take_sampled(self, completion: SampledCompletion, policy_version: int | None) -> None:
        """Append a turn sampled from exactly this transcript."""
        if completion.test_only:
            self._take_text(_assistant_message(completion.text), completion.finish_reason)
            return
        ids = list(completion.token_ids)
        stopped = bool(ids) and ids[-1] == self.renderer.eos_token_id
        text = self.renderer.decode(ids[:-1] if stopped else ids)
        self._notify(completion)
        if policy_version is not None:
            self.policy_versions.append(policy_version)
        self._append_turn(ids, completion.logprobs, _assistant_message(text), stopped)

    def _take_text(self, message: ChatMessage, finish_reason: str) -> None:
        """Append a turn known only as text: the template's rendering of it stands for its tokens (test-only)."""
        self.test_only = True
        stopped = finish_reason != "length"
        if stopped:
            own = self._rendered_turn(message)[1]
            ids = self.renderer.encode(own[: _eos_end(self.renderer, own)])
        else:
            ids = self.renderer.encode(message.content or "")
        completion = SampledCompletion(
            text=message.content or "",
            prompt_token_ids=list(self._tokens),
            token_ids=ids,
            logprobs=None,
            finish_reason="stop" if stopped else "length",
            test_only=True,
        )
        self._notify(completion)
        self._append_turn(ids, None, message, stopped)

    def _append_turn(self, ids: list[int], logprobs: list[float] | None, message: ChatMessage, stopped: bool) -> None:
        if stopped:
            rendered, own = self._rendered_turn(message)
            self._tail = own[_eos_end(self.renderer, own) :]
            self._anchor_text = rendered
        if logprobs is None:
            self._exact_logprobs = False
        self._tokens += ids
        self._masks += ids
        self._logprobs += logprobs if logprobs is not None else [PROMPT_LOGPROB] * len(ids)
        self._trained_end = len(self._tokens)
        self.messages.append(message)
        self.turns += 1
        if stopped:
            self._anchor = len(self.messages)
        else:
            self.truncated = True  # cut by its token budget: the template's end of turn never came

    def _rendered_turn(self, message: ChatMessage) -> tuple[str, str]:
        """The rendering of the conversation ending with assistant ``message`` (not yet appended), and its part
        after the current prompt: the template's text for that turn."""
        rendered = self.renderer.render([*self.messages, message], self.tools)
        _check_prefix(self.renderer, self._prompt_text, rendered)
        return rendered, rendered[len(self._prompt_text) :]

    def _notify(self, completion: SampledCompletion) -> None:
        """Tell the server's listeners (process mode's record of what was sampled) about this turn."""
        listeners = self.server.sample_listeners
        if listeners:
            prompt_text = self.renderer.decode(completion.prompt_token_ids)
            for listener in listeners:
                listener(prompt_text, [completion])


async def ask_all(
    episodes: Sequence[Episode], *, max_tokens: int, temperature: float, top_p: float = 1.0
) -> list[ChatMessage]:
    """One assistant turn for each episode, asked at once; episodes with the same transcript on the same server
    (a group's first turn) share one request with ``n`` samples. Returns each episode's new message."""
    for episode in episodes:
        episode._check_can_ask()
    shared: dict[tuple[int, bool, tuple[int, ...]], list[Episode]] = {}
    for episode in episodes:
        key = (id(episode.server), episode.test_only, tuple(episode.prompt_ids))
        shared.setdefault(key, []).append(episode)
    results = await asyncio.gather(
        *(_ask_together(members, max_tokens, temperature, top_p) for members in shared.values()),
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [episode.messages[-1] for episode in episodes]


async def _ask_together(members: list[Episode], max_tokens: int, temperature: float, top_p: float) -> None:
    from hermes_nb.env.inference_client import InferenceRequestRefused

    first = members[0]
    settings = TurnSettings(first._turn_tokens(max_tokens), temperature, top_p)
    if first.test_only:
        await _ask_by_chat(members, None, settings)
        return
    try:
        batch = await first.server.sample_tokens_batch(first.prompt_ids, n=len(members), **settings._asdict())
    except InferenceRequestRefused as refused:
        await _ask_by_chat(members, refused, settings)
        return
    for episode, completion in zip(members, batch.completions, strict=True):
        episode._take_sampled(completion, batch.policy_version)


async def _ask_by_chat(members: list[Episode], refused: InferenceRequestRefused | None, settings: TurnSettings) -> None:
    """The turn through ``/v1/chat/completions``, for an endpoint that takes no token-id prompt."""
    from hermes_nb.env.inference_client import InferenceError

    first = members[0]
    response = await first.server.chat_completion(first.messages, tools=first.tools or None, n=len(members),
                                                  **settings._asdict())  # fmt: skip
    exact = response.prompt_token_ids is not None and all(c.token_ids is not None for c in response.choices)
    if refused is not None and exact:
        raise refused  # a server that samples token ids refused this prompt itself: the fault is the prompt's
    if len(response.choices) != len(members):
        raise InferenceError(f"inference server returned {len(response.choices)} chat choices for n={len(members)}")
    first.server.text_only_answers += 1
    for episode, choice in zip(members, sorted(response.choices, key=lambda c: c.index), strict=True):
        episode._take_text(_chat_message(choice), choice.finish_reason)


def _assistant_message(text: str) -> ChatMessage:
    parsed = parse_tool_calls(text)
    if not parsed.tool_calls:
        return ChatMessage(role="assistant", content=text)
    return ChatMessage(role="assistant", content=parsed.content, tool_calls=parsed.tool_calls)


def _chat_message(choice: ChatChoice) -> ChatMessage:
    if choice.message.tool_calls:
        return ChatMessage(role="assistant", content=choice.message.content, tool_calls=choice.message.tool_calls)
    return _assistant_message(choice.message.content or "")


def _eos_end(renderer: ChatRenderer, turn_text: str) -> int:
    """Where the template's text for an assistant turn has written its eos token (the end of it)."""
    cut = turn_text.rfind(renderer.eos_token)
    if cut < 0:
        raise ChatTemplateError(
            f"{renderer.source}: the chat template does not end an assistant turn with the eos token "
            f"{renderer.eos_token!r}, so a sampled turn cannot be followed by the template's text"
        )
    return cut + len(renderer.eos_token)


def _check_prefix(renderer: ChatRenderer, earlier: str, later: str) -> None:
    if later.startswith(earlier):
        return
    at = next(
        (i for i, (a, b) in enumerate(zip(earlier, later, strict=False)) if a != b), min(len(earlier), len(later))
    )
    raise TemplateNotPrefixStable(
        f"{renderer.source}: the chat template is not prefix-stable: adding a turn changes the text of earlier "
        f"turns at character {at} ({earlier[at : at + DIFF_CONTEXT_CHARS]!r} became "
        f"{later[at : at + DIFF_CONTEXT_CHARS]!r}); an episode needs a template that only appends"
    )
