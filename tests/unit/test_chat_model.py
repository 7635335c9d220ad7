"""The chat model shipped in the package: loads with ``from_pretrained``, fits the size limit, and its chat template
renders tools, tool calls and tool results in the Hermes/Qwen format, prefix-stably, identically through
transformers and a plain jinja2 environment, so that what the model writes for a call parses back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hermes_nb.config import EMBEDDED_CHAT_MODEL, base_model_dir  # noqa: E402
from hermes_nb.protocol.tool_calls import parse_tool_calls  # noqa: E402
from hermes_nb.system.home import embedded_chat_model_dir  # noqa: E402
from hermes_nb.testing import ModelShape, make_tiny_chat_model  # noqa: E402

MAX_BYTES = 25 * 1024 * 1024
# docs/chat_model.md: pretraining stops at partial greedy held-out episode success (room for RL).
PARTIAL_SUCCESS = (0.15, 0.45)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Arithmetic.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
CALL = {"id": "call_0", "type": "function", "function": {"name": "calculate", "arguments": {"expression": "4*12"}}}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Use the tool."},
    {"role": "user", "content": "Mia has 23 pens. She buys 4 boxes of 12 pens. How many pens does she have now?"},
    {"role": "assistant", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_0", "content": "48"},
    {"role": "assistant", "content": "71"},
]
TOOLS_JSON = json.dumps(TOOLS[0])
EXPECTED = (
    f"<|im_start|>system\nUse the tool.\n\n<tools>\n{TOOLS_JSON}\n</tools><|im_end|>\n"
    "<|im_start|>user\nMia has 23 pens. She buys 4 boxes of 12 pens. How many pens does she have now?<|im_end|>\n"
    '<|im_start|>assistant\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "4*12"}}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n48\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n71<|im_end|>\n"
)


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return transformers.AutoTokenizer.from_pretrained(embedded_chat_model_dir())


def render(tokenizer: Any, messages: list[dict[str, Any]], tools: Any = TOOLS, generation: bool = False) -> str:
    return str(tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation))


def plain_jinja_render(messages: list[dict[str, Any]], tools: Any, generation: bool) -> str:
    """The template through jinja2 alone, set up as transformers sets it up (what an environment process uses)."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string((embedded_chat_model_dir() / "chat_template.jinja").read_text(encoding="utf-8"))
    return str(template.render(messages=messages, tools=tools, add_generation_prompt=generation))


def test_the_shipped_files_fit_the_size_limit_and_use_safetensors() -> None:
    files = [p for p in embedded_chat_model_dir().rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= MAX_BYTES
    assert (embedded_chat_model_dir() / "model.safetensors").is_file()
    assert not any(p.suffix in {".bin", ".pt", ".pth"} for p in files)


def test_the_model_is_a_small_qwen3_with_grouped_query_attention() -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(embedded_chat_model_dir())
    assert model.config.model_type == "qwen3"
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    assert model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) <= 5e6


def test_the_run_config_name_embedded_chat_names_the_shipped_folder() -> None:
    assert EMBEDDED_CHAT_MODEL == "embedded-chat"
    assert base_model_dir(EMBEDDED_CHAT_MODEL) == embedded_chat_model_dir()


def test_generation_ends_at_im_end(tokenizer: Any) -> None:
    generation = json.loads((embedded_chat_model_dir() / "generation_config.json").read_text(encoding="utf-8"))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token == "<|im_end|>"
    assert generation["eos_token_id"] == im_end
    assert generation["pad_token_id"] == tokenizer.pad_token_id != im_end


def test_the_template_renders_tools_tool_calls_and_tool_results(tokenizer: Any) -> None:
    assert render(tokenizer, CONVERSATION) == EXPECTED


def test_the_generation_prompt_opens_an_assistant_turn(tokenizer: Any) -> None:
    text = render(tokenizer, CONVERSATION[:2], tools=None, generation=True)
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert "<tools>" not in text


def test_tools_without_a_system_prompt_get_a_system_turn_of_their_own(tokenizer: Any) -> None:
    text = render(tokenizer, CONVERSATION[1:2])
    assert text.startswith(f"<|im_start|>system\n<tools>\n{TOOLS_JSON}\n</tools><|im_end|>\n<|im_start|>user\n")


def test_a_call_with_text_and_a_string_argument_renders_both(tokenizer: Any) -> None:
    call = {"type": "function", "function": {"name": "calculate", "arguments": '{"expression": "1+1"}'}}
    text = render(tokenizer, [{"role": "assistant", "content": "Let me see.", "tool_calls": [call, call]}], tools=None)
    block = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "1+1"}}\n</tool_call>'
    assert text == f"<|im_start|>assistant\nLet me see.\n{block}\n{block}<|im_end|>\n"


def test_an_unknown_role_is_refused(tokenizer: Any) -> None:
    with pytest.raises(Exception, match="unknown role"):
        render(tokenizer, [{"role": "robot", "content": "hi"}])


def test_the_template_is_prefix_stable_in_text_and_tokens(tokenizer: Any) -> None:
    full = render(tokenizer, CONVERSATION)
    full_ids = tokenizer.encode(full, add_special_tokens=False)
    for k in range(1, len(CONVERSATION)):
        for generation in (False, True):
            prefix = render(tokenizer, CONVERSATION[:k], generation=generation)
            if generation and CONVERSATION[k]["role"] != "assistant":
                continue  # a generation prompt is a prefix only of an assistant turn
            assert full.startswith(prefix)
            ids = tokenizer.encode(prefix, add_special_tokens=False)
            assert full_ids[: len(ids)] == ids


def test_plain_jinja2_renders_the_same_text_as_transformers(tokenizer: Any) -> None:
    for messages, tools, generation in (
        (CONVERSATION, TOOLS, False),
        (CONVERSATION[:4], TOOLS, True),
        (CONVERSATION[1:2], None, True),
    ):
        assert plain_jinja_render(messages, tools, generation) == render(tokenizer, messages, tools, generation)


def test_a_tool_call_in_the_models_format_parses_back(tokenizer: Any) -> None:
    turn = render(tokenizer, CONVERSATION[:3]).removeprefix(render(tokenizer, CONVERSATION[:2], generation=True))
    ids = tokenizer.encode(turn.removesuffix("\n"), add_special_tokens=False)  # what the model writes, eos included
    decoded = tokenizer.decode(ids, skip_special_tokens=True)  # as the inference server decodes
    parsed = parse_tool_calls(decoded)
    assert parsed.content is None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in parsed.tool_calls] == [
        ("calculate", {"expression": "4*12"})
    ]


def test_markup_tokens_are_single_tokens_and_digits_split_one_per_token(tokenizer: Any) -> None:
    for marker in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1
    ids = tokenizer.encode("12345", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in ids] == list("12345")


def test_any_text_round_trips_and_the_tokenizers_library_encodes_the_same(tokenizer: Any) -> None:
    from tokenizers import Tokenizer

    text = EXPECTED + "Ünïcödé, emoji 🙂, tabs\tand {braces}"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    plain = Tokenizer.from_file(str(embedded_chat_model_dir() / "tokenizer.json"))
    assert plain.encode(text, add_special_tokens=False).ids == ids


def test_pretraining_stopped_at_partial_held_out_success() -> None:
    record = json.loads((embedded_chat_model_dir() / "pretraining.json").read_text(encoding="utf-8"))
    low, high = PARTIAL_SUCCESS
    assert low <= record["heldout_success"] <= high
    assert record["steps"] > 0 and record["seconds"] > 0 and record["args"]["seed"] == 0


def test_make_tiny_chat_model_writes_a_small_qwen3_with_the_shipped_tokenizer(tmp_path: Path) -> None:
    path = make_tiny_chat_model(tmp_path / "tiny", ModelShape())
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "qwen3"
    assert sum(p.numel() for p in model.parameters()) < 100_000
    for name in ("tokenizer.json", "chat_template.jinja", "generation_config.json"):
        assert (path / name).read_bytes() == (embedded_chat_model_dir() / name).read_bytes()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    assert render(tokenizer, CONVERSATION) == EXPECTED
