"""rl_test_inference ranks a model trained on the task above the base model it was trained from.

Both parts are deterministic on a given machine: the fine-tune is seeded and draws its items from its own seeded
generator, and the test samples greedily (``env.temperature`` 0), so each model's answer to each of the
environment's prompts (the same prompts for both: its seed is fixed) is fixed. What can differ between machines
is the fine-tune's floating-point path; its spread over fine-tune seeds stands in for that (see the test).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from run_helpers import REPO_ROOT, run

from hermes_nb.api import rl_edit_config, rl_select_environment, rl_test_inference
from hermes_nb.system import home

pytestmark = pytest.mark.e2e

FINE_TUNE_STEPS = 120
# Measured (greedy held-out accuracy of the fine-tuned model, 200 items; the base model: 0.24): the loss on the
# answer only, at 1e-3, gives 0.71; at 5e-4 0.655, at 2e-3 0.53. The loss on the whole sequence (prompt included),
# as this test once trained, gave 0.29, 0.20 and 0.12 for seeds 0, 1, 2 at 2e-3: sometimes below the base model.
FINE_TUNE_LR = 1e-3
# Greedy answers to this many of the environment's prompts per model (groups of 2 identical completions: the
# smallest group an environment accepts): as many completions as the 6 groups of 16 sampled before.
PROMPTS = 48


def _arithmetic_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("_arith_for_test", REPO_ROOT / "environments" / "arithmetic.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the config's annotations through the module
    spec.loader.exec_module(module)
    return module


def fine_tune_on_addition(out: Path, steps: int = FINE_TUNE_STEPS, lr: float = FINE_TUNE_LR, seed: int = 0) -> Path:
    """Teacher-forced training on training items only, the loss on the answer and its end (not on the prompt,
    whose random operands cannot be predicted): a cheap, reliable way to a better checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    arithmetic = _arithmetic_module()
    env = arithmetic.ArithmeticEnv(arithmetic.ArithmeticConfig(seed=seed))  # its training items, from its own RNG
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(home.embedded_base_model_dir())
    model = AutoModelForCausalLM.from_pretrained(home.embedded_base_model_dir())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    eos = tokenizer.eos_token_id
    for _ in range(steps):
        items = [env.train_item() for _ in range(64)]
        prompts = [len(tokenizer.encode(i.prompt, add_special_tokens=False)) for i in items]
        sequences = [[*tokenizer.encode(i.prompt + i.answer, add_special_tokens=False), eos] for i in items]
        width = max(len(s) for s in sequences)
        ids = torch.tensor([s + [eos] * (width - len(s)) for s in sequences])  # [batch, width]
        # [batch, width]: the answer and its end trained; prompt and padding not
        labels = torch.tensor(
            [[-100] * p + s[p:] + [-100] * (width - len(s)) for p, s in zip(prompts, sequences, strict=True)]
        )
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_a_model_trained_on_the_task_ranks_above_the_base_model(tmp_path: Path) -> None:
    """The fine-tuned model answers more of the 48 prompts right than the base model, and is named best.

    Measured 2026-12-01: this test read 0.29 (base) against 0.73 (fine-tuned) on its 48 prompts. The fine-tune's
    spread, over fine-tune seeds 0-4 (greedy held-out accuracy, 200 items; base 0.24): 0.71, 0.61, 0.55, 0.68,
    0.545 (standard deviation 0.07). A failure needs a fine-tune 0.44 below this one on these prompts: with that
    spread and the prompts' own (about 0.09 for a paired difference over 48 items), some 4 standard deviations,
    well under 1 run in 10,000. The test it replaces sampled at temperature 1 and trained the prompt too; its
    fine-tune was sometimes worse than the base model (above), which is how it failed on a fresh machine.
    """
    trained = fine_tune_on_addition(tmp_path / "trained")
    run(rl_select_environment("arithmetic"))
    run(rl_edit_config("env.temperature", 0.0))

    result = run(rl_test_inference(num_steps=PROMPTS, group_size=2, models=["embedded", str(trained)]))

    by_model = {r.model: r for r in result.results}
    assert result.environment_works
    assert result.models_succeeded == 2
    assert result.best_model == str(trained)
    assert by_model[str(trained)].accuracy > by_model["embedded"].accuracy
