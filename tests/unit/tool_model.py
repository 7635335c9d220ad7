"""A tiny model that renders tools and tool calls, and one whose greedy answers are known in advance.

``make_tool_model`` writes ``make_tiny_model``'s random Llama with a Hermes/Qwen-style chat template (tools in a
system turn, calls as ``<tool_call>`` blocks, results as ``<tool_response>`` in a user turn). ``overfit`` trains
it on fixed (prompt, answer) pairs until greedy decoding reproduces every answer exactly: a real model whose
output is deterministic, so the end-to-end tool-call test needs no stand-in for the server's own code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_nb.testing import ModelShape, make_tiny_model

# Jinja as transformers renders it (``tojson`` keeps key order). The assistant turn ends with the tokenizer's
# eos token, so generation stops there.
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n<tools>{% for tool in tools %}{{ tool.function | tojson }}{% endfor %}"
    "</tools><|im_end|>\n{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}<|im_start|>assistant\n"
    "{%- if message.content %}{{ message.content }}{% endif %}"
    "{%- for call in message.tool_calls or [] %}<tool_call>"
    '{"name": {{ call.function.name | tojson }}, "arguments": {{ call.function.arguments | tojson }}}'
    "</tool_call>{% endfor %}{{ eos_token }}\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>{{ message.content }}</tool_response>"
    "<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The shipped model's context (128 positions) is shorter than a prompt with a tool schema; RoPE has no learned
# positions, so a longer context is only a config value.
CONTEXT = 1024
# make_tiny_model's default: it memorises the two answers of ~80 characters in well under a hundred steps.
SHAPE = ModelShape()
# Overfitting stops as soon as every answer decodes exactly; this bounds a run that would not converge.
MAX_STEPS = 600


def make_tool_model(directory: Path) -> Path:
    path = make_tiny_model(directory, SHAPE)
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    config["max_position_embeddings"] = CONTEXT
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tokenizer_config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["model_max_length"] = CONTEXT
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    (path / "chat_template.jinja").write_text(TOOL_TEMPLATE, encoding="utf-8")
    return path


def overfit(path: Path, pairs: list[tuple[list[int], list[int]]]) -> None:
    """Train the model at ``path`` until greedy decoding of each prompt gives its answer; saves it in place."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    sequences = _sequences(pairs)
    inputs = [torch.tensor([ids]) for ids, _ in sequences]
    labels = [torch.tensor([trained]) for _, trained in sequences]
    for step in range(MAX_STEPS):
        model.train()
        loss = sum(model(input_ids=i, labels=y).loss for i, y in zip(inputs, labels, strict=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 9 and _reproduces(model, inputs, labels):
            model.save_pretrained(str(path))
            return
    raise AssertionError(f"the tool model did not memorise its answers in {MAX_STEPS} steps")


def _sequences(pairs: list[tuple[list[int], list[int]]]) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) to train on, labels -100 on prompts. A conversation's later prompt starts with the earlier
    prompt and answer, so it extends that sequence rather than adding one: half the compute for two turns."""
    sequences: list[tuple[list[int], list[int]]] = []
    for prompt, answer in pairs:
        if sequences and prompt[: len(sequences[-1][0])] == sequences[-1][0]:
            ids, labels = sequences.pop()
            labels = labels + [-100] * (len(prompt) - len(ids))
        else:
            labels = [-100] * len(prompt)
        sequences.append((prompt + answer, labels + answer))
    return sequences


def _reproduces(model: Any, inputs: list[Any], labels: list[Any]) -> bool:
    """Whether greedy decoding gives every answer: true exactly when, with the answer fed in, each answer token
    is the argmax at its position (the fed-in prefix is then the greedy one), so one forward pass checks it."""
    import torch

    model.eval()
    with torch.no_grad():
        for ids, target in zip(inputs, labels, strict=True):
            predicted = model(input_ids=ids).logits[0, :-1].argmax(-1)  # [T-1]: position t predicts token t+1
            trained = target[0, 1:] != -100
            if not torch.equal(predicted[trained], target[0, 1:][trained]):
                return False
    return True
