"""The settings of one endpoint under test and what its requests met: plain records, so the ``rl_test_inference``
core can build and read them without loading the HTTP stack (``endpoints.py`` and ``gateway.py`` load it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from hermes_nb.model_test.hosted import HostedModelsConfig
from hermes_nb.model_test.targets import ModelTarget


class EndpointSettings(BaseModel):
    """One endpoint under test: where, which model, which key variable, and the request policy."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    model: str | None = None
    api_key_env: str | None = None
    chat_only: bool = False
    request_timeout_s: float = 120.0
    max_attempts: int = 3
    max_retry_after_s: float = 60.0
    max_concurrent_requests: int = 8
    min_max_tokens: int = 1

    @classmethod
    def for_target(cls, target: ModelTarget, hosted: HostedModelsConfig) -> EndpointSettings:
        # The max_tokens floor is for the hosted provider's models; another server may have a short context.
        at_provider = target.location.rstrip("/") == hosted.base_url.rstrip("/")
        return cls(
            base_url=target.location,
            model=target.model_name,
            api_key_env=target.api_key_env,
            chat_only=target.chat_only,
            request_timeout_s=hosted.request_timeout_s,
            max_attempts=hosted.max_attempts,
            max_retry_after_s=hosted.max_retry_after_s,
            max_concurrent_requests=hosted.max_concurrent_requests,
            min_max_tokens=hosted.min_max_tokens if at_provider else 1,
        )


class EndpointStats(BaseModel):
    """What one model's requests met, for the report (mutated by the gateway while the test runs)."""

    requests: int = 0  # HTTP requests sent upstream
    answered: int = 0  # of those, answered 2xx
    rate_limited: int = 0  # 429 answers, each waited out
    rate_limit_wait_s: float = 0.0
    timeouts: int = 0
    server_errors: int = 0  # 5xx answers and dropped connections
    refusals: int = 0  # completions the provider refused (content filter)
    empty_answers: int = 0  # completions answered with no text
    failed_completions: int = 0  # completions given up on (returned empty)
    prompt_tokens: int = 0  # as the provider's usage counts them
    completion_tokens: int = 0
    latency_s: float = 0.0  # summed over answered requests
    sent_as_chat: bool = False  # plain-completion prompts went to /chat/completions as one user message
    last_error: str | None = None

    @property
    def mean_latency_s(self) -> float:
        return round(self.latency_s / self.answered, 3) if self.answered else 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
