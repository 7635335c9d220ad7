"""The inference wire format: OpenAI-compatible completions and chat, plus ``/generate`` on token ids.

The OpenAI shapes are the public ones; two additive fields carry what RL needs and OpenAI omits: the prompt's
token ids (``prompt_token_ids``) and each choice's sampled token ids (``token_ids``), so an environment can
build a ``ScoredDataGroup`` without re-tokenizing (re-tokenizing text is lossy for byte-level tokenizers).
hermes-nb's server always fills them; hosted providers answer with text only, so a response without them is
valid too (the environment then re-tokenizes, and what it builds is for testing only).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Guards against a client asking the CPU server for an unbounded amount of work in one request.
MAX_N = 256
MAX_NEW_TOKENS = 4096

# ``content_filter``: a hosted provider refused to answer (OpenAI's name for it); hermes-nb's server never sends it.
# ``tool_calls``: a chat answer that parsed as tool calls (``hermes_nb.protocol.tool_calls``).
FinishReason = Literal["stop", "length", "content_filter", "tool_calls"]


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="ignore")

    n: int = Field(default=1, ge=1, le=MAX_N)
    max_tokens: int = Field(default=16, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    # One last chunk with no choices and the request's ``usage`` (OpenAI's ``stream_options.include_usage``).
    include_usage: bool = False


class Streaming(BaseModel):
    """``stream: true`` asks for the answer as server-sent events (``data: {chunk}`` lines, then ``data: [DONE]``),
    the shape every OpenAI SDK and agent harness reads. The sampled tokens are the same as without streaming."""

    stream: bool = False
    stream_options: StreamOptions | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(SamplingParams, Streaming):
    model: str = "policy"
    prompt: str | list[str] | list[int]
    # OpenAI semantics: an int asks for per-token logprobs (we return the sampled token's; top-k is 0 or 1).
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False


class FunctionCall(BaseModel):
    """OpenAI's ``function`` of a tool call: ``arguments`` is a JSON object serialised as a string."""

    name: str = Field(min_length=1)
    arguments: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    """One entry of a chat request's ``tools``: OpenAI's function tool (the only kind there is to call)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: dict[str, str]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    # Null or absent only on an assistant turn that made tool calls (OpenAI sends ``"content": null`` there, and
    # an SDK message dumped without its None fields has no ``content``).
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content_or_calls(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"content: null is only accepted on an assistant message with tool_calls, not {self.role}")
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"tool_calls: only an assistant message carries them, not {self.role}")
        return self


class ChatCompletionRequest(SamplingParams, Streaming):
    model: str = "policy"
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=5)
    # Rendered by the model's chat template; the answer is parsed for calls in the Hermes format. ``tool_choice``
    # ``none`` renders no tools and parses nothing; ``required`` and a named function are honoured by what is
    # rendered (a named function: only that tool), not enforced on sampling.
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None


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
    token_ids: list[int] | None = None  # absent from text-only endpoints


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
    prompt_token_ids: list[list[int]] | None = None  # absent from text-only endpoints
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
    # Null when the answer is tool calls only (OpenAI's shape; some servers leave it out then); the exact tokens
    # stay in ``ChatChoice.token_ids``.
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason
    token_ids: list[int] | None = None  # absent from text-only endpoints


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_token_ids: list[int] | None = None  # absent from text-only endpoints


class CompletionChunkChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None = None
    token_ids: list[int] | None = None


class CompletionChunk(BaseModel):
    """One server-sent event of a streamed ``/v1/completions`` answer (OpenAI's shape: ``text_completion``)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Usage | None = None
    prompt_token_ids: list[list[int]] | None = None
    policy_version: int | None = None


class ToolCallDelta(BaseModel):
    index: int  # the call's place among the choice's calls
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a streamed ``/v1/chat/completions`` answer (``chat.completion.chunk``)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = None


class GenerateRequest(BaseModel):
    """``/generate``: prompts as token ids; ``n`` samples of each."""

    prompt_token_ids: list[list[int]] = Field(min_length=1)
    n: int = Field(default=1, ge=1, le=MAX_N)
    max_tokens: int = Field(default=16, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop_token_ids: list[int] | None = None
    seed: int | None = None


class VLLMPrompt(BaseModel):
    prompt_token_ids: list[int] = Field(min_length=1)


class VLLMGenerateRequest(SamplingParams):
    """``/generate`` in vLLM's native shape, as atroposlib's ``VLLMServer`` sends it (what its ``managed_server``
    samples through): one prompt as token ids, vLLM's sampling fields (those hermes-nb has no use for, such as
    ``skip_special_tokens``, are ignored, as ``SamplingParams`` ignores unknown fields)."""

    prompt: VLLMPrompt
    logprobs: int | None = Field(default=None, ge=0, le=5)  # vLLM: how many top logprobs; the sampled one is sent


class VLLMGenerateResponse(BaseModel):
    """Per sample: ``logprobs[i][t]`` is ``[{"<token id>": logprob}]`` for the t-th sampled token (vLLM's shape),
    ``text[i]`` its text and ``finish_reasons[i]`` why it ended."""

    text: list[str]
    logprobs: list[list[list[dict[str, float]]]]
    finish_reasons: list[FinishReason]
    policy_version: int


class TokenSamplingParams(SamplingParams):
    """The ``sampling_params`` of ``/inference/v1/generate`` (vLLM's token-in endpoint): vLLM's sampling fields,
    those hermes-nb has no use for ignored as ``SamplingParams`` ignores them (``skip_special_tokens``: the answer
    is token ids; ``logprobs``: the sampled token's logprob is always sent)."""

    stop_token_ids: list[int] | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)


class TokenGenerateRequest(BaseModel):
    """``POST /inference/v1/generate``: one prompt as token ids, as verifiers' train client (through the
    ``renderers`` package) and prime-rl send it."""

    model: str = "policy"
    token_ids: list[int] = Field(min_length=1)
    sampling_params: TokenSamplingParams = Field(default_factory=TokenSamplingParams)


class TokenLogprob(BaseModel):
    """One sampled token's logprob, the token named ``token_id:<id>`` (what ``renderers`` checks it against)."""

    token: str
    logprob: float


class TokenLogprobs(BaseModel):
    content: list[TokenLogprob]


class TokenChoice(BaseModel):
    index: int
    token_ids: list[int]
    logprobs: TokenLogprobs
    finish_reason: FinishReason


class TokenGenerateResponse(BaseModel):
    request_id: str
    choices: list[TokenChoice]
    prompt_token_ids: list[int]
    usage: Usage
    policy_version: int


class ModelCard(BaseModel):
    """One model of ``GET /v1/models``; ``max_model_len`` is vLLM's addition (the context, prompt and completion
    together), which ``renderers`` reads to refuse an overlong prompt before sending it."""

    id: str
    object: Literal["model"] = "model"
    owned_by: str = "hermes-nb"
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


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


def openai_base_url(url: str) -> str:
    """``http://host:port`` or ``http://host:port/v1`` -> ``http://host:port/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"
