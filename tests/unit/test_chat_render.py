"""``ChatRenderer`` renders and encodes as transformers' ``apply_chat_template`` does, with jinja2 and tokenizers
only, and a run's ``tokenizer_name`` leads it to the run's model folder."""

from __future__ import annotations

import functools
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from hermes_nb.config import EMBEDDED_BASE_MODEL, EMBEDDED_CHAT_MODEL, base_model_dir
from hermes_nb.env import AgentEnv, AgentEnvConfig, ChatRenderer, QAItem, chat_render
from hermes_nb.env.chat_render import ChatTemplateError, load_chat_renderer
from hermes_nb.protocol.inference import ChatMessage, FunctionCall, FunctionSpec, ToolCall, ToolSpec
from hermes_nb.protocol.tool_calls import template_message
from hermes_nb.system.home import embedded_base_model_dir, embedded_chat_model_dir

TOOLS = [
    ToolSpec(
        function=FunctionSpec(
            name="calculate",
            description="Whole-number arithmetic: + - * / <and> parentheses, é",
            parameters={"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
        )
    ),
    ToolSpec(function=FunctionSpec(name="lookup", parameters={"type": "object", "properties": {}})),
]
CALL = ToolCall(id="call_1", function=FunctionCall(name="calculate", arguments='{"expression": "4*12"}'))
SECOND = ToolCall(id="call_2", function=FunctionCall(name="lookup", arguments="{}"))
CONVERSATION = [
    ChatMessage(role="system", content="Use the tool."),
    ChatMessage(role="user", content="Mia has 23 pens and buys 4 boxes of 12. How many now?"),
    ChatMessage(role="assistant", content=None, tool_calls=[CALL]),
    ChatMessage(role="tool", content="48", tool_call_id="call_1"),
    ChatMessage(role="assistant", content="Next step.", tool_calls=[CALL, SECOND]),
    ChatMessage(role="tool", content="71", tool_call_id="call_1"),
    ChatMessage(role="tool", content="{}", tool_call_id="call_2"),
    ChatMessage(role="assistant", content="71"),
]


@functools.cache
def _transformers_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _transformers_render(folder: Path, messages: list[ChatMessage], tools: list[ToolSpec] | None, gen: bool) -> Any:
    tokenizer = _transformers_tokenizer(folder)
    dumped_tools = [t.model_dump(exclude_none=True) for t in tools] if tools else None
    text = tokenizer.apply_chat_template(
        [template_message(m) for m in messages], tools=dumped_tools, add_generation_prompt=gen, tokenize=False
    )
    return tokenizer, text


@pytest.mark.parametrize("with_tools", [True, False])
@pytest.mark.parametrize("turns", [2, 4, 8])
@pytest.mark.parametrize("gen", [True, False])
def test_the_chat_models_template_renders_as_transformers_renders_it(with_tools: bool, turns: int, gen: bool) -> None:
    folder = embedded_chat_model_dir()
    messages, tools = CONVERSATION[:turns], TOOLS if with_tools else None
    tokenizer, expected = _transformers_render(folder, messages, tools, gen)
    renderer = ChatRenderer.from_model_dir(folder)
    text = renderer.render(messages, tools, add_generation_prompt=gen)
    assert text == expected
    assert renderer.encode(text) == list(tokenizer.encode(expected, add_special_tokens=False))
    assert renderer.decode(renderer.encode(text)) == text


def test_tool_calls_render_the_json_itself_no_html_escaping_and_non_ascii_kept() -> None:
    text = ChatRenderer.from_model_dir(embedded_chat_model_dir()).render(CONVERSATION[:4], TOOLS)
    assert "<and>" in text and "é" in text and "\\u" not in text
    assert '{"name": "calculate", "arguments": {"expression": "4*12"}}' in text


def test_eos_is_the_folders_eos_token() -> None:
    renderer = ChatRenderer.from_model_dir(embedded_chat_model_dir())
    config = json.loads((embedded_chat_model_dir() / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert renderer.eos_token == config["eos_token"]
    assert renderer.encode(renderer.eos_token) == [renderer.eos_token_id]


@pytest.mark.parametrize(
    ("name", "folder"),
    [(EMBEDDED_CHAT_MODEL, embedded_chat_model_dir), (EMBEDDED_BASE_MODEL, embedded_base_model_dir)],
)
def test_a_runs_tokenizer_name_leads_to_its_model_folder(name: str, folder: Any) -> None:
    assert load_chat_renderer(name).source == str(folder())
    assert base_model_dir(name) == folder()


def test_a_model_directory_as_tokenizer_name_is_read_from_that_directory(tmp_path: Path) -> None:
    copy = tmp_path / "my_model"
    shutil.copytree(embedded_chat_model_dir(), copy)
    (copy / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}", encoding="utf-8")
    renderer = load_chat_renderer(str(copy))
    assert renderer.source == str(copy)
    assert renderer.render([ChatMessage(role="user", content="hi")]) == "[hi]"


class _Agent(AgentEnv):
    def generate_problem(self, rng: random.Random) -> QAItem:
        return QAItem(prompt=str(rng.random()), answer="0")

    def tools(self) -> list[ToolSpec]:
        return TOOLS

    async def call_tool(self, call: FunctionCall, item: QAItem) -> str:
        return ""


def test_an_agent_envs_renderer_follows_its_locked_tokenizer_name(tmp_path: Path) -> None:
    assert _Agent(AgentEnvConfig(tokenizer_name=EMBEDDED_CHAT_MODEL)).renderer.source == str(embedded_chat_model_dir())
    copy = shutil.copytree(embedded_chat_model_dir(), tmp_path / "run_model")
    assert _Agent(AgentEnvConfig(tokenizer_name=str(copy))).renderer.source == str(copy)


def test_a_template_in_tokenizer_config_is_used_when_there_is_no_template_file(tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(embedded_chat_model_dir(), copy)
    (copy / "chat_template.jinja").unlink()
    config = json.loads((copy / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = [
        {"name": "default", "template": "plain:{{ messages[0].content }}"},
        {"name": "tool_use", "template": "tools:{{ tools | length }}"},
    ]
    (copy / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    renderer = ChatRenderer.from_model_dir(copy)
    assert renderer.render([ChatMessage(role="user", content="x")]) == "plain:x"
    assert renderer.render([ChatMessage(role="user", content="x")], TOOLS) == "tools:2"


def _with_template(tmp_path: Path, template: str) -> ChatRenderer:
    copy = tmp_path / "model"
    shutil.copytree(embedded_chat_model_dir(), copy, dirs_exist_ok=True)
    (copy / "chat_template.jinja").write_text(template, encoding="utf-8")
    return ChatRenderer.from_model_dir(copy)


def test_the_templates_raise_exception_is_an_error_naming_the_folder(tmp_path: Path) -> None:
    renderer = _with_template(tmp_path, "{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ChatTemplateError, match=r"model: the chat template failed: .*roles must alternate"):
        renderer.render([ChatMessage(role="user", content="x")])


def test_generation_blocks_and_loop_controls_render_as_in_transformers(tmp_path: Path) -> None:
    template = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% generation %}<{{ m.content }}>{% endgeneration %}{% if loop.index > 2 %}{% break %}{% endif %}{% endfor %}"
    )
    renderer = _with_template(tmp_path, template)
    messages = [ChatMessage(role="system", content="s")] + [ChatMessage(role="user", content=str(i)) for i in range(4)]
    from transformers import AutoTokenizer

    expected = AutoTokenizer.from_pretrained(str(tmp_path / "model")).apply_chat_template(
        [template_message(m) for m in messages], tokenize=False
    )
    assert renderer.render(messages) == expected == "<0><1>"


def test_a_folder_without_a_template_is_refused_naming_it(tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(embedded_chat_model_dir(), copy)
    (copy / "chat_template.jinja").unlink()
    with pytest.raises(ChatTemplateError, match=r"model: no chat_template.jinja and no chat_template"):
        ChatRenderer.from_model_dir(copy)


def test_a_folder_without_a_tokenizer_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ChatTemplateError, match=r"no tokenizer.json"):
        ChatRenderer.from_model_dir(tmp_path)


def _counting_renders(renderer: ChatRenderer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list whose length is the template renders ``renderer`` makes from now on."""
    renders: list[int] = []
    real = renderer._render

    def counted(*args: Any) -> str:
        renders.append(1)
        return real(*args)

    monkeypatch.setattr(renderer, "_render", counted)
    return renders


def test_a_conversation_rendered_again_is_the_same_text_without_a_second_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renderer = ChatRenderer.from_model_dir(shutil.copytree(embedded_chat_model_dir(), tmp_path / "model"))
    renders = _counting_renders(renderer, monkeypatch)

    first = renderer.render(CONVERSATION[:2], TOOLS, add_generation_prompt=True)
    again = renderer.render([ChatMessage.model_validate(m.model_dump()) for m in CONVERSATION[:2]], TOOLS, True)
    without_tools = renderer.render(CONVERSATION[:2], None, add_generation_prompt=True)

    assert again == first and without_tools != first
    assert len(renders) == 2  # the equal conversation was not rendered again; the one without tools was


def test_the_render_cache_keeps_the_most_recent_conversations_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renderer = ChatRenderer.from_model_dir(shutil.copytree(embedded_chat_model_dir(), tmp_path / "model"))
    conversations = [[ChatMessage(role="user", content=f"{i}+1=")] for i in range(chat_render.RENDER_CACHE_SIZE + 1)]
    for conversation in conversations:
        renderer.render(conversation)
    renders = _counting_renders(renderer, monkeypatch)

    renderer.render(conversations[-1])
    assert len(renders) == 0
    renderer.render(conversations[0])  # the oldest, dropped when the last came in
    assert len(renders) == 1


def test_a_template_that_reads_the_clock_is_rendered_every_time(tmp_path: Path) -> None:
    renderer = _with_template(tmp_path, "{{ strftime_now('%H:%M:%S.%f') }}")
    message = ChatMessage(role="user", content="x")

    assert renderer.render([message]) != renderer.render([message])


def test_an_encoding_handed_out_is_the_callers_to_change() -> None:
    renderer = load_chat_renderer(EMBEDDED_CHAT_MODEL)
    text = renderer.render([ChatMessage(role="user", content="12+34=")], add_generation_prompt=True)
    ids = renderer.encode(text)
    expected = list(ids)

    ids.append(renderer.eos_token_id)

    assert renderer.encode(text) == expected
