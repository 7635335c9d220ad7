"""``python -m hermes_nb.processes.inference_server --model DIR --port N [--host 127.0.0.1] [--threads 1]``: serve one
model.

A standalone inference server for a fixed model directory (a base model, a checkpoint): what ``rl_test_inference``
starts per local model (``hermes_nb.inference.local``), with the native engine, or Tinker's for a Tinker run's
checkpoint. The socket listens first and ``/health`` answers 503 until the model is loaded, so a caller waits on health,
never on a sleep. SIGTERM or SIGINT stop it (cleanly once it serves).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hermes_nb.inference.contract import Policy

logger = logging.getLogger("hermes_nb.inference")

# Exit status of a user error (bad arguments, no model there), as argparse uses.
USAGE_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path, help="a Hugging Face model directory (config.json)")
    parser.add_argument("--port", required=True, type=int, help="port to listen on (see system.net.free_port)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampler")
    parser.add_argument("--name", default=None, help="model name reported by /health (default: the directory)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto (bfloat16 on CUDA, float32 on CPU), float32, ...")
    return parser


def _usage_problem(args: argparse.Namespace) -> str | None:
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback:
        return f"--host: {args.host} is not a loopback address; the server binds 127.0.0.1 (or ::1) only"
    if not (args.model / "config.json").is_file():
        return f"--model: {args.model} is not a model directory (no config.json)"
    if args.threads is not None and args.threads < 1:
        return f"--threads: must be at least 1 (got {args.threads})"
    return _hardware_problem(args)


def _hardware_problem(args: argparse.Namespace) -> str | None:
    from hermes_nb.errors import ConfigError
    from hermes_nb.system.devices import resolve_device, resolve_dtype

    try:
        resolve_dtype(args.dtype, resolve_device(args.device, "--device"), "--dtype")
    except ConfigError as exc:
        return str(exc)
    return None


def _load_policy(model_dir: Path, name: str, device: str = "auto", dtype: str = "auto") -> Policy:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hermes_nb.system.devices import resolve_hardware

    hardware = resolve_hardware(device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=hardware.dtype)
    model.to(hardware.device).eval()
    return Policy(model=model, tokenizer=tokenizer, version=0, name=name)


def serve(args: argparse.Namespace, stop: threading.Event) -> int:
    import torch

    from hermes_nb.inference.engine import InferenceEngine
    from hermes_nb.inference.server import Engine, InferenceServer
    from hermes_nb.protocol.tinker import read_checkpoint
    from hermes_nb.tinker.engine import TinkerEngine, checkpoint_policy

    if args.threads:
        torch.set_num_threads(args.threads)
    # A Tinker run's checkpoint holds no weights here: its sampler weights are served from the Tinker server.
    on_tinker = read_checkpoint(args.model) is not None
    engine: Engine = TinkerEngine() if on_tinker else InferenceEngine(seed=args.seed)
    server = InferenceServer(engine, args.port, host=args.host)
    server.start()
    logger.info("listening on %s:%d; loading %s", args.host, args.port, args.model)
    try:
        name = args.name or args.model.name
        policy = (
            checkpoint_policy(args.model, name)
            if on_tinker
            else _load_policy(args.model, name, args.device, args.dtype)
        )
        if policy is None:
            logger.error("--model: %s is a Tinker checkpoint without sampler weights; nothing to serve", args.model)
            return USAGE_ERROR
        engine.publish(policy)
        # Until now SIGTERM keeps its default (end at once): a server stopped while loading has nothing to save.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        logger.info("model loaded; serving")
        stop.wait()
    finally:
        server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s inference %(levelname)s %(message)s")
    problem = _usage_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return USAGE_ERROR
    return serve(args, threading.Event())


if __name__ == "__main__":
    sys.exit(main())
