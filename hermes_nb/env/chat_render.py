"""A model folder's chat template and tokenizer, with ``jinja2`` and ``tokenizers`` only.

An agent environment builds its token transcript from the model's own chat template (``hermes_nb.env.episodes``),
but the environment process never imports torch or transformers. ``ChatRenderer`` reads what
``AutoTokenizer.from_pretrained`` reads — ``tokenizer.json``, ``tokenizer_config.json`` (its special tokens, and
its ``chat_template`` when there is no ``chat_template.jinja``) — and renders with the settings transformers
compiles a template with (``transformers.utils.chat_template_utils``): an immutable sandbox, ``trim_blocks`` and
``lstrip_blocks``, the loop-control extension, a ``tojson`` filter that is ``json.dumps`` (no HTML escaping),
``raise_exception`` and ``strftime_now``, and the named special tokens (``eos_token``, ...) as variables. So the
text is the one ``apply_chat_template(..., tokenize=False)`` gives, and ``encode`` reads it as transformers does
(no tokens added around it). Messages and tools are passed as plain JSON data, tool-call arguments as objects
(the Hugging Face convention), fields that are ``None`` left out.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hermes_nb.config import base_model_dir
from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.inference import ChatMessage, ToolSpec
from hermes_nb.protocol.tool_calls import template_data, template_message

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
# The named special tokens transformers hands every template (``special_tokens_map``); extra special tokens are not.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Names under which a folder with several templates keeps the one for tool use and the default one.
TOOL_USE_TEMPLATE = "tool_use"
DEFAULT_TEMPLATE = "default"
# Renderings (and encodings) kept per renderer: a group's episodes render and encode the same prompt (and often the
# same reply), and a template's render costs several times the JSON key that finds it again.
RENDER_CACHE_SIZE = 256
# A template that reads the clock renders differently over time: never cached.
CLOCK_FUNCTION = "strftime_now"


class ChatTemplateError(HermesNBError):
    """A model folder's chat template or tokenizer is missing or unusable; the message names the file."""


class ChatRenderer:
    """Renders conversations with a model's chat template and encodes the text with its tokenizer."""

    def __init__(
        self, templates: Mapping[str, str], tokenizer: Any, special_tokens: Mapping[str, str], *, source: str
    ) -> None:
        if DEFAULT_TEMPLATE not in templates and TOOL_USE_TEMPLATE not in templates:
            raise ChatTemplateError(f"{source}: no chat template (expected {TEMPLATE_FILE} or a 'chat_template')")
        self.source = source  # names the template in errors: the folder it was read from
        self._templates = dict(templates)
        self._tokenizer = tokenizer
        self.special_tokens = dict(special_tokens)
        eos = self.special_tokens.get("eos_token")
        eos_id = tokenizer.token_to_id(eos) if eos is not None else None
        if eos is None or eos_id is None:
            raise ChatTemplateError(f"{source}: eos_token {eos!r} is not a token of {TOKENIZER_FILE}")
        self.eos_token: str = eos
        self.eos_token_id: int = int(eos_id)
        self._renders: OrderedDict[str, str] = OrderedDict()
        self._encodings: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    @classmethod
    def from_model_dir(cls, path: str | Path) -> ChatRenderer:
        """The template and tokenizer of the model folder at ``path``."""
        folder = Path(path).expanduser()
        tokenizer_path = folder / TOKENIZER_FILE
        if not tokenizer_path.is_file():
            raise ChatTemplateError(f"{folder}: no {TOKENIZER_FILE}; a chat model folder needs its tokenizer")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ChatTemplateError(
                "the 'tokenizers' package is needed to encode chat templates: pip install 'hermes-nb[train]'"
            ) from None
        config = _read_json(folder / TOKENIZER_CONFIG_FILE)
        return cls(
            _templates(folder, config),
            Tokenizer.from_file(str(tokenizer_path)),
            _special_tokens(config),
            source=str(folder),
        )

    def render(
        self,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        tools: Sequence[ToolSpec | Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The template's text for ``messages`` (and ``tools``), with the assistant's opening when asked; a
        conversation rendered recently is not rendered again (unless the template reads the clock)."""
        template_tools = [template_data(tool) for tool in tools] if tools else None
        template_messages = [template_message(m) for m in messages]
        source = self._template_for(template_tools is not None)
        if CLOCK_FUNCTION in source:
            return self._render(source, template_messages, template_tools, add_generation_prompt)
        # Tools or none pick the template, so the key names it too.
        key = json.dumps([template_messages, template_tools, add_generation_prompt], sort_keys=True, default=str)
        text = _recall(self._renders, key)
        if text is None:
            text = self._render(source, template_messages, template_tools, add_generation_prompt)
            _remember(self._renders, key, text)
        return text

    def _render(
        self,
        source: str,
        messages: list[dict[str, Any]],
        tools: list[Any] | None,
        add_generation_prompt: bool,
    ) -> str:
        try:
            text = _compile(source).render(
                messages=messages,
                tools=tools,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self.special_tokens,
            )
        except Exception as exc:  # a template's own raise_exception, or a template bug: name the template
            raise ChatTemplateError(f"{self.source}: the chat template failed: {type(exc).__name__}: {exc}") from exc
        return str(text)

    def encode(self, text: str) -> list[int]:
        """``text``'s token ids, with no special tokens added around it (special tokens in it are read as such)."""
        ids = _recall(self._encodings, text)
        if ids is None:
            ids = tuple(self._tokenizer.encode(text, add_special_tokens=False).ids)
            _remember(self._encodings, text, ids)
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens included: the inverse of ``encode`` for the template's text."""
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))

    def _template_for(self, with_tools: bool) -> str:
        if with_tools and TOOL_USE_TEMPLATE in self._templates:
            return self._templates[TOOL_USE_TEMPLATE]
        return self._templates.get(DEFAULT_TEMPLATE) or self._templates[TOOL_USE_TEMPLATE]


def _recall(cache: OrderedDict[str, Any], key: str) -> Any:
    """``cache``'s value for ``key`` (now its most recent), or None."""
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _remember(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
    """Keep ``value`` under ``key``; the least recent entry is dropped beyond ``RENDER_CACHE_SIZE``."""
    cache[key] = value
    if len(cache) > RENDER_CACHE_SIZE:
        cache.popitem(last=False)


@functools.cache
def load_chat_renderer(tokenizer_name: str) -> ChatRenderer:
    """The renderer of a run's ``tokenizer_name`` (``embedded``, ``embedded-chat`` or a model folder), once."""
    return ChatRenderer.from_model_dir(base_model_dir(tokenizer_name))


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ChatTemplateError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ChatTemplateError(f"{path}: expected a JSON object")
    return data


def _templates(folder: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """The folder's templates by name: ``chat_template.jinja`` wins, as in transformers, over the config's."""
    template_file = folder / TEMPLATE_FILE
    if template_file.is_file():
        return {DEFAULT_TEMPLATE: template_file.read_text(encoding="utf-8")}
    declared = config.get("chat_template")
    if isinstance(declared, str):
        return {DEFAULT_TEMPLATE: declared}
    if isinstance(declared, list):  # several named templates: [{"name": ..., "template": ...}]
        return {str(t["name"]): str(t["template"]) for t in declared if isinstance(t, dict) and "template" in t}
    raise ChatTemplateError(f"{folder}: no {TEMPLATE_FILE} and no chat_template in {TOKENIZER_CONFIG_FILE}")


def _special_tokens(config: Mapping[str, Any]) -> dict[str, str]:
    """The named special tokens of ``tokenizer_config.json`` (a string, or an added token's ``content``)."""
    tokens: dict[str, str] = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[name] = value
    return tokens


@functools.cache
def _compile(source: str) -> Any:
    """``source`` compiled as transformers compiles chat templates (once per template text)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        # Not jinja's own tojson, which escapes HTML characters: the model must see the JSON itself.
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format: str) -> str:
        return datetime.datetime.now().strftime(format)

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_generation_block(), jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    try:
        return environment.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template: syntax error on line {exc.lineno}: {exc.message}") from None


@functools.cache
def _generation_block() -> type:
    """``{% generation %}...{% endgeneration %}`` renders its body as it is: templates mark the assistant's text
    with it for transformers' assistant-token masks, which the episode gets from what was sampled instead."""
    import jinja2.ext
    import jinja2.nodes

    class GenerationBlock(jinja2.ext.Extension):
        tags = {"generation"}  # noqa: RUF012 - jinja2 reads the tag names from this class attribute

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    return GenerationBlock
