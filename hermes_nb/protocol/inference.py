"""The inference wire format: OpenAI-compatible completions and chat, plus ``/generate`` on token ids.

The OpenAI shapes are the public ones; two additive fields carry what RL needs and OpenAI omits: the prompt's
token ids (``prompt_token_ids``) and each choice's sampled token ids (``token_ids``), so an environment can
build a ``ScoredDataGroup`` without re-tokenizing (re-tokenizing text is lossy for byte-level tokenizers).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Guards against a client asking the CPU server for an unbounded amount of work in one request.
MAX_N = 256
MAX_NEW_TOKENS = 4096

FinishReason = Literal["stop", "length"]


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="ignore")

    n: int = Field(default=1, ge=1, le=MAX_N)
    max_tokens: int = Field(default=16, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None


class CompletionRequest(SamplingParams):
    model: str = "policy"
    prompt: str | list[str] | list[int]
    # OpenAI semantics: an int asks for per-token logprobs (we return the sampled token's; top-k is 0 or 1).
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str


class ChatCompletionRequest(SamplingParams):
    model: str = "policy"
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=5)


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason
    token_ids: list[int]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    prompt_token_ids: list[list[int]]
    # Additive: the optimizer step of the weights that produced every choice (hermes-nb's server fills it; one
    # request is one batch, so all its choices share it). Lets an evaluation say exactly which policy it measured.
    policy_version: int | None = None


class ChatLogprobContent(BaseModel):
    token: str
    logprob: float


class ChatLogprobs(BaseModel):
    content: list[ChatLogprobContent]


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason
    token_ids: list[int]


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_token_ids: list[int]


class GenerateRequest(BaseModel):
    """``/generate``: prompts as token ids; ``n`` samples of each."""

    prompt_token_ids: list[list[int]] = Field(min_length=1)
    n: int = Field(default=1, ge=1, le=MAX_N)
    max_tokens: int = Field(default=16, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop_token_ids: list[int] | None = None
    seed: int | None = None


class GeneratedSequence(BaseModel):
    prompt_index: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


class GenerateResponse(BaseModel):
    # Sequences are ordered prompt-major: all n samples of prompt 0, then prompt 1, ...
    sequences: list[GeneratedSequence]
    policy_version: int


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    policy_version: int
