"""A finished answer as server-sent events: what ``stream: true`` gets from the inference server.

Sampling is batched (every completion of a request is generated together, then answered), so an answer streams
in whole pieces, not token by token: per choice one chunk with its role, text or tool calls (and, additive as in the
plain answer, its exact ``token_ids``), then one with its ``finish_reason``; with ``stream_options.include_usage``
a last chunk with no choices and the request's usage; then ``data: [DONE]``. A client that reads the stream (the
``openai`` SDK, an agent harness) assembles exactly the content, ``tool_calls`` and usage it would have got without
streaming, and what was sampled, and recorded for training, is the same either way.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from hermes_nb.protocol.inference import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatDelta,
    CompletionChunk,
    CompletionChunkChoice,
    CompletionResponse,
    ToolCallDelta,
)

SSE_MEDIA_TYPE = "text/event-stream"
DONE_EVENT = "data: [DONE]\n\n"


def server_sent_events(chunks: Iterator[BaseModel]) -> Iterator[str]:
    """``data: {json}`` per chunk (fields that are None left out, as OpenAI leaves them), then the end marker."""
    for chunk in chunks:
        yield f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"
    yield DONE_EVENT


def chat_chunks(answer: ChatCompletionResponse, include_usage: bool) -> Iterator[ChatCompletionChunk]:
    def chunk(choices: list[ChatChunkChoice], **extra: object) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=answer.id, created=answer.created, model=answer.model, choices=choices, **extra)

    for choice in answer.choices:
        message = choice.message
        calls = [
            ToolCallDelta(index=i, id=call.id, function=call.function)
            for i, call in enumerate(message.tool_calls or [])
        ]
        delta = ChatDelta(role="assistant", content=message.content, tool_calls=calls or None)
        first = ChatChunkChoice(index=choice.index, delta=delta, logprobs=choice.logprobs, token_ids=choice.token_ids)
        yield chunk([first], prompt_token_ids=answer.prompt_token_ids)
        yield chunk([ChatChunkChoice(index=choice.index, delta=ChatDelta(), finish_reason=choice.finish_reason)])
    if include_usage:
        yield chunk([], usage=answer.usage)


def completion_chunks(answer: CompletionResponse, include_usage: bool) -> Iterator[CompletionChunk]:
    def chunk(choices: list[CompletionChunkChoice], **extra: object) -> CompletionChunk:
        return CompletionChunk(
            id=answer.id,
            created=answer.created,
            model=answer.model,
            choices=choices,
            policy_version=answer.policy_version,
            **extra,
        )

    for choice in answer.choices:
        text = CompletionChunkChoice(
            index=choice.index, text=choice.text, logprobs=choice.logprobs, token_ids=choice.token_ids
        )
        yield chunk([text], prompt_token_ids=answer.prompt_token_ids)
        yield chunk([CompletionChunkChoice(index=choice.index, text="", finish_reason=choice.finish_reason)])
    if include_usage:
        yield chunk([], usage=answer.usage)
