"""A Tinker run's final weights, downloaded into its run directory as a model ``from_pretrained`` loads.

The server keeps the weights as a LoRA adapter (``save_weights_for_sampler``: ``adapter_model.safetensors`` and
``adapter_config.json``, which names the base model). ``download_final_weights`` fetches the archive of the last
checkpoint's sampler weights into ``<run>/tinker_weights/adapter/`` and, when the base model's directory is on this
machine, merges the adapter into it (``W + alpha / r * B @ A``, the LoRA update) and saves the result with its
tokenizer in ``<run>/tinker_weights/model/``. Without the base model here (a hosted model such as Qwen/Qwen3-8B),
the adapter directory is the result: peft's ``AutoPeftModelForCausalLM.from_pretrained`` loads it onto its base.

``checkpoint_weights`` does the same for one checkpoint, into ``<checkpoint>/tinker_weights/`` (kept: a checkpoint
never changes), for a local run that starts from a Tinker run's weights (``trainer.pretrained_model_path``).

``download_in_child`` / ``checkpoint_weights_in_child`` run them in ``python -m hermes_nb.tinker.weights
RUN_DIR`` (``--checkpoint CHECKPOINT_DIR``), so the SDK's threads and connections never live in the caller's
process (a notebook kernel).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.errors import TinkerError
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.run_files import CHECKPOINTS_FILE, CONFIG_FILE, TINKER_WEIGHTS_DIR
from hermes_nb.protocol.tinker import TinkerCheckpoint, read_checkpoint

ADAPTER_DIR = "adapter"
MERGED_DIR = "model"
ADAPTER_PREFIX = "base_model.model."
# An archive of a LoRA adapter of a large model is a few hundred MB: minutes on a slow link.
DOWNLOAD_TIMEOUT_S = 1800.0
EXPORT_NAME = "hermes-nb-download"
# The shortest TTL the service accepts (an hour): the export is deleted after the download anyway.
EXPORT_TTL_S = 3600


def final_tinker_checkpoint(run_dir: Path) -> TinkerCheckpoint:
    for record in reversed(read_checkpoints(run_dir / CHECKPOINTS_FILE)):
        saved = read_checkpoint(Path(record.path))
        if saved is not None and saved.sampler_path:
            return saved
    raise TinkerError(f"{run_dir}: no Tinker checkpoint with sampler weights to download (is it a Tinker run?)")


def split_sampler_path(path: str) -> tuple[str, str]:
    """``tinker://<run>/sampler_weights/<id>`` -> (run, id)."""
    parts = path.removeprefix("tinker://").split("/")
    return parts[0], parts[-1]


def archive_url(rest: Any, sampler_path: str) -> str:
    """The archive's download URL. The SDK asks for checkpoint ``sampler_weights/<id>`` (hosted Tinker's naming);
    SkyRL 0.3.0 answers 404 there and serves it as plain ``<id>``, so that is asked next."""
    tinker = _tinker()
    try:
        answer = rest.get_checkpoint_archive_url_from_tinker_path(tinker_path=sampler_path).result()
    except tinker.NotFoundError:
        run, checkpoint = split_sampler_path(sampler_path)
        answer = rest.get_checkpoint_archive_url(training_run_id=run, checkpoint_id=checkpoint).result()
    return str(answer.url)


def _tinker() -> Any:
    from hermes_nb.tinker.calls import import_tinker

    return import_tinker()


def fetch_adapter(url: str, target: Path) -> Path:
    """Download and unpack the archive at ``url`` into ``target`` (replaced whole, never half-written)."""
    import httpx

    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    archive = partial / "archive.tar.gz"
    with httpx.stream("GET", url, follow_redirects=True, timeout=DOWNLOAD_TIMEOUT_S) as response:
        response.raise_for_status()
        with archive.open("wb") as out:
            for chunk in response.iter_bytes():
                out.write(chunk)
    with tarfile.open(archive) as tar:
        tar.extractall(partial, filter="data")  # "data": no absolute paths, links out or devices
    archive.unlink()
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def merge_adapter(adapter_dir: Path, base_dir: Path, target: Path) -> Path:
    """The base model with the adapter merged in, saved with the base's tokenizer: ``from_pretrained`` loads it."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    rank = int(config["r"])
    scale = float(config["lora_alpha"]) / (rank**0.5 if config.get("use_rslora") else rank)
    tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    weights = model.state_dict()
    with torch.no_grad():
        for key, a_rk in tensors.items():
            if not key.endswith(".lora_A.weight"):
                continue
            module = key.removeprefix(ADAPTER_PREFIX).removesuffix(".lora_A.weight")
            b_or = tensors[key.replace(".lora_A.", ".lora_B.")]
            if f"{module}.weight" not in weights:
                raise TinkerError(f"{adapter_dir}: adapter weight {key} has no matching weight in {base_dir}")
            # W [out, in] += scale * B [out, r] @ A [r, in]
            weights[f"{module}.weight"] += scale * (b_or.float() @ a_rk.float())
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial))
    AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(partial))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def fetch_external(service: Any, rest: Any, state_path: str, target: Path) -> Path:
    """SDKs that export "external weights" (tinker 0.38): export the checkpoint's weights, download each file from
    its signed URL into ``target``, then delete the export."""
    import httpx

    from hermes_nb.tinker.calls import resolved

    training = resolved(service.create_training_client_from_state(path=state_path))
    export = resolved(training.save_weights_external(name=EXPORT_NAME, ttl_seconds=EXPORT_TTL_S)).path
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        urls = resolved(rest.get_external_weights_urls(tinker_path=export)).urls
        for relative, url in urls.items():
            destination = partial / relative
            if partial.resolve() not in destination.resolve().parents:
                raise TinkerError(f"the export lists a file outside its folder: {relative!r}")
            destination.parent.mkdir(parents=True, exist_ok=True)
            with httpx.stream("GET", url, follow_redirects=True, timeout=DOWNLOAD_TIMEOUT_S) as response:
                response.raise_for_status()
                with destination.open("wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
    finally:
        resolved(rest.delete_checkpoint_from_tinker_path(tinker_path=export))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def fetch_weights(service: Any, saved: TinkerCheckpoint, target: Path) -> Path:
    """The checkpoint's weights in ``target``, by whichever route the installed SDK offers."""
    rest = service.create_rest_client()
    if hasattr(rest, "get_external_weights_urls"):
        return fetch_external(service, rest, saved.state_path, target)
    return fetch_adapter(archive_url(rest, str(saved.sampler_path)), target)


def download_weights(saved: TinkerCheckpoint, base_url: str | None, root: Path) -> Path:
    """``saved``'s weights in ``root``: a whole model as exported, the adapter merged into its base when the base
    model is here, else the adapter (its config names the base)."""
    from hermes_nb.tinker.calls import connect

    root.mkdir(exist_ok=True)
    fetched = fetch_weights(connect(base_url), saved, root / ADAPTER_DIR)
    base = Path(saved.base_model).expanduser()
    if not (fetched / "adapter_config.json").is_file() or not (base / "config.json").is_file():
        return fetched
    return merge_adapter(fetched, base, root / MERGED_DIR)


def download_final_weights(run_dir: Path) -> Path:
    """The run's final weights in ``<run>/tinker_weights/`` (``download_weights``)."""
    config = RunConfig.load(run_dir / CONFIG_FILE)
    return download_weights(final_tinker_checkpoint(run_dir), config.tinker.base_url, run_dir / TINKER_WEIGHTS_DIR)


def checkpoint_weights(checkpoint_dir: Path) -> Path:
    """The weights of one Tinker checkpoint in ``<checkpoint>/tinker_weights/``, downloaded once. The server is
    the one its run trained on (the checkpoint's ``config.yaml``)."""
    saved = read_checkpoint(checkpoint_dir)
    if saved is None or not saved.sampler_path:
        raise TinkerError(f"{checkpoint_dir}: not a Tinker checkpoint with sampler weights")
    root = checkpoint_dir / TINKER_WEIGHTS_DIR
    for kept in (root / MERGED_DIR, root / ADAPTER_DIR):
        if (kept / "config.json").is_file() or (kept / "adapter_config.json").is_file():
            return kept  # written whole or not at all (fetch_adapter, merge_adapter)
    config_file = checkpoint_dir / CONFIG_FILE
    base_url = RunConfig.load(config_file).tinker.base_url if config_file.is_file() else None
    return download_weights(saved, base_url, root)


def _in_child(args: list[str], what: str) -> Path:
    """Run this module with ``args`` in a child process; a failure is a ``TinkerError`` with the child's one line."""
    done = subprocess.run(
        [sys.executable, "-m", "hermes_nb.tinker.weights", *args],
        capture_output=True,
        text=True,
        timeout=DOWNLOAD_TIMEOUT_S + 120,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        reason = lines[-1] if lines else (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TinkerError(f"downloading {what} failed: {reason}")
    return Path(lines[-1])


def download_in_child(run_dir: Path) -> Path:
    """``download_final_weights`` in a child process."""
    return _in_child([str(run_dir)], f"the final weights of {run_dir.name}")


def checkpoint_weights_in_child(checkpoint_dir: Path) -> Path:
    """``checkpoint_weights`` in a child process."""
    return _in_child(["--checkpoint", str(checkpoint_dir)], f"the weights of {checkpoint_dir}")


def main() -> int:
    try:
        if sys.argv[1] == "--checkpoint":
            print(checkpoint_weights(Path(sys.argv[2])), flush=True)
        else:
            print(download_final_weights(Path(sys.argv[1])), flush=True)
    except Exception as exc:  # one line for the parent
        print(" ".join(str(exc).split()) or type(exc).__name__, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
