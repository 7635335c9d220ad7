"""The inference server on a real loopback port: health, logprobs equal the model's forward pass, batching of
concurrent requests, OpenAI shapes, stop handling, and atomic policy swaps."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch

from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.server import InferenceServer
from hermes_nb.system.net import free_port
from hermes_nb.testing import make_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_tiny_model(tmp_path_factory.mktemp("tiny"))
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    return model, AutoTokenizer.from_pretrained(str(path))


@pytest.fixture
def server(model_and_tokenizer: tuple[Any, Any]) -> Iterator[tuple[InferenceServer, str]]:
    engine = InferenceEngine(window_s=0.05, seed=0)  # a wide window so the concurrency test is deterministic
    srv = InferenceServer(engine, free_port())
    srv.start()
    yield srv, f"http://127.0.0.1:{srv.port}"
    srv.stop()


def _publish(srv: InferenceServer, model_and_tokenizer: tuple[Any, Any], version: int = 0) -> Policy:
    model, tokenizer = model_and_tokenizer
    policy = Policy(model=model, tokenizer=tokenizer, version=version, name="tiny")
    srv.engine.publish(policy)
    return policy


def test_health_is_503_until_a_policy_is_published(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    assert httpx.get(f"{url}/health").status_code == 503
    assert httpx.post(f"{url}/generate", json={"prompt_token_ids": [[5, 6]]}).status_code == 503
    _publish(srv, model_and_tokenizer, version=3)
    response = httpx.get(f"{url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "model": "tiny", "policy_version": 3}


def test_generate_logprobs_equal_the_models_forward_pass(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    _publish(srv, model_and_tokenizer)
    prompts = [[10, 11, 12], [20, 21, 22, 23, 24]]  # different lengths: left padding must not leak
    body = {"prompt_token_ids": prompts, "n": 4, "max_tokens": 6, "temperature": 1.0}
    sequences = httpx.post(f"{url}/generate", json=body, timeout=30).json()["sequences"]
    assert [s["prompt_index"] for s in sequences] == [0] * 4 + [1] * 4
    model = model_and_tokenizer[0]
    for seq in sequences:
        prompt = prompts[seq["prompt_index"]]
        ids = torch.tensor([prompt + seq["token_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)[0]
        positions = torch.arange(len(prompt) - 1, ids.shape[1] - 1)
        expected = logp[positions, torch.tensor(seq["token_ids"])]
        assert torch.allclose(torch.tensor(seq["logprobs"]), expected, atol=1e-4)


def test_generate_in_vllms_shape_answers_as_vllm_does_with_the_same_logprobs(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    # atroposlib's VLLMServer (behind its managed_server) posts this, with sampling fields vLLM knows
    srv, url = server
    _publish(srv, model_and_tokenizer)
    prompt = [10, 11, 12]
    body = {"prompt": {"prompt_token_ids": prompt}, "logprobs": 0, "n": 3, "max_tokens": 5, "temperature": 1.0,
            "skip_special_tokens": True}  # fmt: skip
    answer = httpx.post(f"{url}/generate", json=body, timeout=30).json()
    assert len(answer["logprobs"]) == len(answer["finish_reasons"]) == len(answer["text"]) == 3
    model, tokenizer = model_and_tokenizer
    for per_token, finish_reason, text in zip(
        answer["logprobs"], answer["finish_reasons"], answer["text"], strict=True
    ):
        assert all(len(position) == 1 and len(position[0]) == 1 for position in per_token)  # [{"<id>": logprob}]
        ids = [int(next(iter(position[0]))) for position in per_token]
        logprobs = [next(iter(position[0].values())) for position in per_token]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + ids])).logits.float(), -1)[0]
        expected = logp[torch.arange(len(prompt) - 1, len(prompt) + len(ids) - 1), torch.tensor(ids)]
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)
        assert finish_reason in ("stop", "length") and text == tokenizer.decode(ids, skip_special_tokens=True)
    refused = httpx.post(f"{url}/generate", json={"prompt": {"prompt_token_ids": []}})
    assert refused.status_code == 422 and "prompt_token_ids" in refused.text


def test_inference_v1_generate_answers_as_vllm_does_for_verifiers_train_client(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    # what the renderers package (verifiers' train client) posts, and the fields it reads back
    srv, url = server
    _publish(srv, model_and_tokenizer, version=4)
    prompt = [10, 11, 12]
    sampling = {"temperature": 1.0, "max_tokens": 5, "n": 2, "stop_token_ids": [7], "logprobs": 1,
                "skip_special_tokens": False}  # fmt: skip
    answer = httpx.post(
        f"{url}/inference/v1/generate", json={"model": "tiny", "token_ids": prompt, "sampling_params": sampling},
        timeout=30,
    ).json()  # fmt: skip
    assert answer["policy_version"] == 4 and answer["prompt_token_ids"] == prompt and len(answer["choices"]) == 2
    model, _ = model_and_tokenizer
    for choice in answer["choices"]:
        ids = choice["token_ids"]
        assert [entry["token"] for entry in choice["logprobs"]["content"]] == [f"token_id:{t}" for t in ids]
        assert 7 not in ids[:-1] and choice["finish_reason"] in ("stop", "length")
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + ids])).logits.float(), -1)[0]
        expected = logp[torch.arange(len(prompt) - 1, len(prompt) + len(ids) - 1), torch.tensor(ids)]
        logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)
    assert answer["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in answer["choices"])
    refused = httpx.post(f"{url}/inference/v1/generate", json={"token_ids": []})
    assert refused.status_code == 422 and "token_ids" in refused.text


def test_models_lists_the_policy_with_its_context_as_max_model_len(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    policy = _publish(srv, model_and_tokenizer)
    [card] = httpx.get(f"{url}/v1/models").json()["data"]
    assert card["id"] == "tiny" and card["max_model_len"] == policy.model.config.max_position_embeddings


def test_concurrent_requests_share_one_batch(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    _publish(srv, model_and_tokenizer)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            bodies = [{"prompt_token_ids": [[10 + i, 11]], "n": 8, "max_tokens": 4} for i in range(6)]
            return await asyncio.gather(*(client.post("/generate", json=b) for b in bodies))

    responses = asyncio.run(burst())
    assert all(r.status_code == 200 and len(r.json()["sequences"]) == 8 for r in responses)
    assert srv.engine.batches_run < 6
    assert srv.engine.rows_run == 48


def test_seeded_requests_are_reproducible(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    _publish(srv, model_and_tokenizer)
    body = {"prompt_token_ids": [[30, 31]], "n": 3, "max_tokens": 8, "seed": 42}
    first = httpx.post(f"{url}/generate", json=body, timeout=30).json()["sequences"]
    second = httpx.post(f"{url}/generate", json=body, timeout=30).json()["sequences"]
    assert [s["token_ids"] for s in first] == [s["token_ids"] for s in second]


def test_completions_have_openai_shape_and_respect_stop(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    _publish(srv, model_and_tokenizer)
    body = {"prompt": "12+34=", "n": 5, "max_tokens": 12, "logprobs": 1, "temperature": 0.0}
    greedy = httpx.post(f"{url}/v1/completions", json=body, timeout=30).json()
    texts = {c["text"] for c in greedy["choices"]}
    assert len(texts) == 1  # greedy: all samples equal
    text = texts.pop()
    assert greedy["choices"][0]["logprobs"]["token_logprobs"] == [0.0] * len(greedy["choices"][0]["token_ids"])
    assert greedy["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in greedy["choices"])
    if len(text) >= 3:
        stop = text[2]
        stopped = httpx.post(f"{url}/v1/completions", json={**body, "stop": [stop]}, timeout=30).json()
        choice = stopped["choices"][0]
        assert choice["finish_reason"] == "stop"
        assert choice["text"] == text[: text.index(stop)]


def test_chat_completions_use_the_chat_template(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    _publish(srv, model_and_tokenizer)
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 3, "logprobs": True}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).json()
    tokenizer = model_and_tokenizer[1]
    assert response["prompt_token_ids"] == tokenizer.encode("hi", add_special_tokens=False)
    assert len(response["choices"]) == 2
    assert len(response["choices"][0]["logprobs"]["content"]) == len(response["choices"][0]["token_ids"])


def test_bad_prompts_get_a_400_naming_the_field(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    _publish(srv, model_and_tokenizer)
    out_of_vocab = httpx.post(f"{url}/generate", json={"prompt_token_ids": [[5, 10_000]]})
    assert out_of_vocab.status_code == 400 and "prompt_token_ids[0]" in out_of_vocab.json()["detail"]
    too_long = httpx.post(f"{url}/generate", json={"prompt_token_ids": [[5] * 100], "max_tokens": 100})
    assert too_long.status_code == 400 and "context" in too_long.json()["detail"]
    assert httpx.post(f"{url}/v1/completions", json={"prompt": ""}).status_code == 400


def test_responses_report_the_policy_version_that_generated_them(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    srv, url = server
    _publish(srv, model_and_tokenizer, version=1)
    body = {"prompt_token_ids": [[5, 6]], "max_tokens": 2}
    assert httpx.post(f"{url}/generate", json=body, timeout=30).json()["policy_version"] == 1
    _publish(srv, model_and_tokenizer, version=2)
    assert httpx.post(f"{url}/generate", json=body, timeout=30).json()["policy_version"] == 2


def test_a_multi_prompt_evaluation_request_is_answered_by_one_policy_version(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from hermes_nb.env.inference_client import ServerManager
    from hermes_nb.env.server_config import APIServerConfig

    srv, url = server
    _publish(srv, model_and_tokenizer, version=7)
    manager = ServerManager([APIServerConfig(base_url=f"{url}/v1")])
    prompts = ["12+3=", "7+7=", "99+1="]

    async def evaluate() -> Any:
        try:
            return await manager.sample_batch(prompts, max_tokens=3, temperature=0.0)
        finally:
            await manager.aclose()

    batch = asyncio.run(evaluate())
    tokenizer = model_and_tokenizer[1]
    assert batch.policy_version == 7
    assert [c.prompt_token_ids for c in batch.completions] == [tokenizer.encode(p) for p in prompts]
    # Greedy and batched: each answer is what the prompt alone would get.
    alone = [
        httpx.post(f"{url}/v1/completions", json={"prompt": p, "max_tokens": 3, "temperature": 0}).json()
        for p in prompts
    ]
    assert [c.text for c in batch.completions] == [a["choices"][0]["text"] for a in alone]
    assert {a["policy_version"] for a in alone} == {7}


def test_published_weights_are_served_from_the_next_batch_with_their_version(server, model_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    import copy

    srv, url = server
    model, tokenizer = model_and_tokenizer
    own = copy.deepcopy(model)
    srv.engine.publish(Policy(model=own, tokenizer=tokenizer, version=0, name="tiny"))
    body = {"prompt_token_ids": [[5, 6, 7]], "max_tokens": 4, "temperature": 1.0, "seed": 3}
    before = httpx.post(f"{url}/generate", json=body, timeout=30).json()
    # New weights: every parameter scaled, so greedy logprobs must change.
    weights = {k: t.detach().clone() * 1.5 for k, t in model.state_dict().items()}
    srv.engine.publish_weights(weights, version=4)
    weights_before_serving = {k: t.clone() for k, t in weights.items()}
    after = httpx.post(f"{url}/generate", json=body, timeout=30).json()
    assert before["policy_version"] == 0 and after["policy_version"] == 4
    assert after["sequences"][0]["logprobs"] != before["sequences"][0]["logprobs"]
    assert all(torch.equal(own.state_dict()[k], weights_before_serving[k]) for k in weights)
    assert httpx.get(f"{url}/health").json()["policy_version"] == 4
    # The caller's model is untouched: the engine loaded the weights into the policy's own module.
    assert all(torch.equal(model.state_dict()[k] * 1.5, weights[k]) for k in weights)
