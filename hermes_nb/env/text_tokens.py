"""The run's tokenizer, in the environment process, for endpoints that answer with text only.

Hosted providers send text, no token ids. Scoring needs only the text; a ``ScoredDataGroup`` needs token ids, so
the environment reads the prompt and the text with the run's tokenizer (``tokenizer_name``: ``embedded`` or a
model directory) and the group is marked test-only. The Rust ``tokenizers`` library reads ``tokenizer.json``
directly: the environment process still never imports torch or transformers.
"""

from __future__ import annotations

import functools
from typing import Any

from hermes_nb.config import base_model_dir
from hermes_nb.errors import HermesNBError

TOKENIZER_FILE = "tokenizer.json"


class TokenizerUnavailable(HermesNBError):
    """The run's tokenizer could not be loaded, so text-only answers cannot become token sequences."""


class TextTokenizer:
    """Encodes prompts as hermes-nb's inference server does (special tokens included) and completions without."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def encode_prompt(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text).ids)

    def encode_completion(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)


@functools.cache
def load_text_tokenizer(name: str) -> TextTokenizer:
    """The tokenizer of ``name`` (``embedded`` or a model directory), loaded once per process."""
    path = base_model_dir(name) / TOKENIZER_FILE
    if not path.is_file():
        raise TokenizerUnavailable(
            f"tokenizer_name: {name!r} has no {TOKENIZER_FILE} at {path}; an endpoint that answers with text only "
            "needs the run's tokenizer (the base model's directory) to build groups"
        )
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerUnavailable(
            "the 'tokenizers' package is needed to read text-only answers: pip install 'hermes-nb[train]'"
        ) from None
    return TextTokenizer(Tokenizer.from_file(str(path)))
