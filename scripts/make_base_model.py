"""Make the tiny base model shipped in ``hermes_nb/assets/base_model/`` (documented in docs/base_model.md).

    .venv/bin/python scripts/make_base_model.py                 # rewrites hermes_nb/assets/base_model/
    .venv/bin/python scripts/make_base_model.py --out /tmp/bm   # anywhere else

What it does, seeded and on one CPU thread so that a rerun gives the same weights:
1. builds a character-level tokenizer (printable ASCII and newline, plus <pad> <bos> <eos> <unk>) with the
   ``tokenizers`` library and wraps it as a ``PreTrainedTokenizerFast`` with a plain chat template;
2. builds a ~0.86M-parameter Llama-architecture causal LM from a config (random init);
3. pretrains it, supervised, on a mix of the shipped environments' *training* generators (prompt + answer +
   end-of-sequence; the loss is on the answer and the end-of-sequence token, since prompts are random);
4. stops as soon as greedy held-out accuracy on the quickstart task (2-digit addition) reaches ``--stop-at``
   (checked every ``EVAL_EVERY`` steps): deliberately partial, so that RL has room to show;
5. saves safetensors weights, the tokenizer and ``pretraining.json`` (steps, seconds, held-out accuracy per task).

The test suite never runs this script; it takes about a minute on one core.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
# This script and the environments import hermes_nb: make this checkout importable when it is not installed.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from hermes_nb.env import QAEnv, QAItem  # noqa: E402
from hermes_nb.env.splits import draw_item  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "hermes_nb" / "assets" / "base_model"
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Every printable ASCII character and newline: the shipped tasks use digits, + - = : and a-z; the rest lets
# custom environments and chat prompts tokenize without <unk>.
CHARACTERS = ["\n", *(chr(code) for code in range(32, 127))]
# Chat = the contents in order; an assistant turn ends with <eos>. A generation prompt adds nothing: the
# model answers right after the user's text, as in pretraining.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
)
# Sized on evidence (docs/base_model.md): 128 wide x 4 layers learns 2-digit addition in a minute of
# pretraining and a GRPO step of 128 short completions stays well under a second on two cores.
MODEL_SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}
# Shipped prompts + answers are under 40 characters; 128 leaves room for custom tasks at no cost (RoPE).
MAX_POSITIONS = 128
# The quickstart task is the one whose accuracy decides when pretraining stops.
QUICKSTART_TASK = "add"
# Addition is the hardest task for its length and the one RL is shown on: half of every batch (4 : 1+1+1+1).
ADD_WEIGHT = 4.0
# Accuracy rises steeply once addition "clicks" (under 10% to over 30% within ~150 steps): check often.
EVAL_EVERY = 25
EVAL_ITEMS = 200


@dataclass
class Task:
    """One shipped environment with a fixed config, used for its task methods only (no server is contacted)."""

    label: str
    env: QAEnv
    weight: float

    def train_item(self, rng: random.Random) -> QAItem:
        # One RNG shared by all tasks, not the environment's own: the mix interleaves them in one seeded stream.
        return draw_item(self.env.generate_problem, rng, "train")

    def eval_items(self) -> list[QAItem]:
        return self.env.eval_items()

    def max_tokens(self) -> int:
        return self.env.max_completion_tokens()


def load_environment(name: str) -> ModuleType:
    path = REPO_ROOT / "environments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"shipped_env_{name}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def configured(env_class: type[QAEnv], **fields: Any) -> QAEnv:
    """``env_class`` at its default config plus ``fields``; constructing it contacts no server."""
    return env_class(env_class.env_config_cls(eval_items=EVAL_ITEMS, **fields))


def pretraining_tasks() -> list[Task]:
    """The mix: every shipped task at its default config, addition and subtraction as separate tasks."""
    arithmetic = load_environment("arithmetic").ArithmeticEnv
    tasks = [
        Task("add", configured(arithmetic, operation="add"), ADD_WEIGHT),
        Task("sub", configured(arithmetic, operation="sub"), 1.0),
    ]
    for name, class_name in (
        ("reverse_string", "ReverseStringEnv"),
        ("sort_letters", "SortLettersEnv"),
        ("count_letters", "CountLettersEnv"),
    ):
        tasks.append(Task(name, configured(getattr(load_environment(name), class_name)), 1.0))
    return tasks


def build_tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *CHARACTERS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # One token per character, newline included ([\s\S] also matches "\n", unlike ".").
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()  # ids -> characters joined with nothing in between
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
        # Left padding: batched generation appends to the right end of every row.
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def build_model(tokenizer: Any, shape: dict[str, Any] | None = None) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,  # halves the embedding parameters; nothing lost at this vocabulary size
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **(shape or MODEL_SHAPE),
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def make_batch(tokenizer: Any, items: list[Any]) -> dict[str, torch.Tensor]:
    """Right-padded prompt+answer+eos rows; labels are -100 on prompt and padding (not trained on)."""
    rows, labels = [], []
    for item in items:
        prompt_ids = tokenizer.encode(item.prompt, add_special_tokens=False)
        answer_ids = [*tokenizer.encode(item.answer, add_special_tokens=False), tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        labels.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(row) for row in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows])  # [B, T]
    label_ids = torch.tensor([row + [-100] * (width - len(row)) for row in labels])  # [B, T]
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])  # [B, T]
    return {"input_ids": input_ids, "attention_mask": mask, "labels": label_ids}


@torch.no_grad()
def greedy_accuracy(model: Any, tokenizer: Any, task: Task, items: list[Any] | None = None) -> float:
    """Held-out accuracy with greedy decoding: the share the environment judges correct (its checker, its verdict)."""
    items = items if items is not None else task.eval_items()
    model.eval()
    encoded = tokenizer([item.prompt for item in items], return_tensors="pt", padding=True)
    output = model.generate(
        **encoded, max_new_tokens=task.max_tokens(), do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train()
    env = task.env
    correct = [
        env.is_correct(env.score_completion(text.split("\n")[0], item.answer))
        for text, item in zip(texts, items, strict=True)
    ]
    return sum(correct) / len(correct)


def pretrain(model: Any, tokenizer: Any, tasks: list[Task], args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    quickstart = next(task for task in tasks if task.label == QUICKSTART_TASK)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    weights = [task.weight for task in tasks]
    history: list[dict[str, float]] = []
    started = time.perf_counter()
    step = 0
    while step < args.max_steps:
        items = [rng.choices(tasks, weights)[0].train_item(rng) for _ in range(args.batch_size)]
        loss = model(**make_batch(tokenizer, items)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % EVAL_EVERY:
            continue
        accuracy = greedy_accuracy(model, tokenizer, quickstart)
        history.append({"step": step, "loss": round(loss.item(), 4), QUICKSTART_TASK: accuracy})
        print(f"step {step} loss {loss.item():.3f} {QUICKSTART_TASK} {accuracy:.3f}", flush=True)
        if accuracy >= args.stop_at:
            break
    return {"steps": step, "seconds": round(time.perf_counter() - started, 1), "history": history}


def portable_tokenizer_config(path: Path) -> None:
    """Name the tokenizer class by its transformers 4.x name, which transformers 5 also loads (its own name,
    ``TokenizersBackend``, is unknown to 4.x)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop-at", type=float, default=0.2, help="quickstart held-out accuracy to stop at")
    parser.add_argument("--max-steps", type=int, default=6000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # reproducible numerics, and the other core stays free
    torch.manual_seed(args.seed)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    tasks = pretraining_tasks()
    record = pretrain(model, tokenizer, tasks, args)
    record["heldout_accuracy"] = {task.label: greedy_accuracy(model, tokenizer, task) for task in tasks}
    record["parameters"] = sum(p.numel() for p in model.parameters())
    record["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"}
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    portable_tokenizer_config(args.out / "tokenizer_config.json")
    (args.out / "pretraining.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "history"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
