"""Text for groups recorded without ``messages`` (an atroposlib environment that sends none, a run recorded
before environments sent them): the run's tokenizer decodes the token ids.

The tokenizer is the local backend's base model's (``trainer.base_model`` of the run's ``config.yaml``); a run
on another backend, or one whose model directory is gone, has none, and its samples show token counts only.
The split into prompt and completion is at the first trained token, which is exact for single-turn groups.
"""

from __future__ import annotations

import logging
from typing import Any

from hermes_nb.config import RunConfig, base_model_dir
from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.trajectory import MASK_IGNORE

log = logging.getLogger(__name__)


def run_tokenizer(paths: RunPaths) -> Any | None:
    """The tokenizer of the run's base model, or None when there is none to load."""
    try:
        config = RunConfig.load(paths.config)
    except (HermesNBError, OSError, ValueError):
        return None
    if config.trainer.backend != "local":
        return None
    # A transfer run starts from other weights of the same base model: the vocabulary is the base model's.
    model_dir = base_model_dir(config.trainer.base_model)
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir))
    except (ImportError, OSError, ValueError) as exc:
        log.info("no tokenizer for the samples of %s (%s): token counts only", paths.run_id, exc)
        return None


def decoded_messages(tokenizer: Any, tokens: list[int], mask: list[int]) -> list[dict[str, Any]]:
    """``[prompt, completion]`` as user and assistant turns, split at the first trained token."""
    split = next((t for t, m in enumerate(mask) if m != MASK_IGNORE), len(tokens))
    return [
        {"role": "user", "content": str(tokenizer.decode(tokens[:split], skip_special_tokens=True))},
        {"role": "assistant", "content": str(tokenizer.decode(tokens[split:], skip_special_tokens=True))},
    ]
