"""Test an atroposlib environment, as it is, against a model. Runs in the environment Python.

    python -m hermes_nb.frameworks.atroposlib.model_testing_bridge FILE CLASS --rows PATH -- process --config YAML

FILE is imported as ``python FILE`` imports it, and everything after ``--`` goes to the class's own ``cli()``:
atroposlib's ``process`` command collects ``total_steps`` groups and writes them to its own file. Around
atroposlib's ``BaseEnv.handle_send_to_api``, through which ``process`` hands over every scored group, the bridge
writes each group once more as a row of ``rl_test_inference``'s groups file (``--rows``), the format hermes-nb's
own ``process`` mode writes (``hermes_nb.env_host.process_command``): the group, marked test-only (its tokens are the
environment's reading of text, and it is for looking at, never for training), each completion's prompt, text,
score and verdict, and the item.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hermes_nb.frameworks.atroposlib.bridge import USAGE_ERROR, class_to_run, one_server_per_declared
from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup, last_exchange

logger = logging.getLogger("hermes_nb.frameworks.atroposlib.model_testing_bridge")


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The bridge's own arguments, and atroposlib's (everything after ``--``)."""
    args = list(argv)
    split = args.index("--") if "--" in args else len(args)
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.splitlines()[0])
    parser.add_argument("file", help="the environment's file")
    parser.add_argument("class_name", help="its atroposlib BaseEnv subclass")
    parser.add_argument("--rows", required=True, help="the groups file rl_test_inference reads")
    return parser.parse_args(args[:split]), args[split + 1 :]


class GroupRows:
    """The test's groups file, one JSON line per scored group, written as each group is handed over."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = path.open("w", encoding="utf-8")
        self.count = 0

    def write(self, env: Any, raw: Any, item: Any) -> None:
        group = ScoredDataGroup.model_validate(_plain(raw)).as_test_only()
        verdicts = group.verdicts()
        samples = [
            {**_texts(env, group, index), "finish_reason": None, "score": score, "correct": correct}
            for index, (score, correct) in enumerate(zip(group.scores, verdicts, strict=True))
        ]
        row = {
            "index": self.count,
            "item": _jsonable(item),
            "scores": group.scores,
            "samples": samples,
            "group": group.model_dump(mode="json", exclude_none=True),
        }
        self._handle.write(json.dumps(row) + "\n")
        self._handle.flush()  # a test cut short by its timeout still counts the groups it made
        self.count += 1


def install(base: type, rows: GroupRows) -> None:
    """Wrap ``base``'s (atroposlib's ``BaseEnv``) ``handle_send_to_api`` so each group is also a row."""
    original = base.handle_send_to_api  # type: ignore[attr-defined]

    async def handle_send_to_api(self: Any, scored_data: Any, *args: Any, **kwargs: Any) -> Any:
        answer = await original(self, scored_data, *args, **kwargs)  # fills each group's messages in process mode
        item = inspect.signature(original).bind(self, scored_data, *args, **kwargs).arguments.get("item")
        for raw in scored_data if isinstance(scored_data, list) else [scored_data]:
            if raw is not None:
                rows.write(self, raw, item)
        return answer

    base.handle_send_to_api = handle_send_to_api  # type: ignore[attr-defined]


def _plain(raw: Any) -> dict[str, Any]:
    """An atroposlib group (a dict, or a pydantic model in some versions) as plain JSON values."""
    data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
    return json.loads(json.dumps(data, default=str))


def _texts(env: Any, group: ScoredDataGroup, index: int) -> dict[str, str | None]:
    """Member ``index``'s prompt and completion: its conversation's last turns when the group has them, else its
    tokens read with the environment's tokenizer (the completion: the trained tokens)."""
    messages = group.messages[index] if group.messages else []
    if messages and messages[-1].role == "assistant":
        return last_exchange(messages)
    tokens, masks = group.tokens[index], group.masks[index]
    first_trained = next((i for i, mask in enumerate(masks) if mask != MASK_IGNORE), len(tokens))
    trained = [token for token, mask in zip(tokens, masks, strict=True) if mask != MASK_IGNORE]
    decode = env.tokenizer.decode
    return {
        "prompt": decode(tokens[:first_trained], skip_special_tokens=True),
        "completion": decode(trained, skip_special_tokens=True),
    }


def _jsonable(item: Any) -> Any:
    try:
        return json.loads(json.dumps(item, default=str))
    except (TypeError, ValueError):
        return repr(item)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s process_bridge %(levelname)s %(message)s")
    args, cli_args = parse_args(sys.argv[1:] if argv is None else argv)
    cls = class_to_run(args, logger)
    if cls is None:
        return USAGE_ERROR
    from atroposlib.envs.base import BaseEnv

    rows = GroupRows(Path(args.rows))
    install(BaseEnv, rows)
    one_server_per_declared(cls, cli_args)
    logger.info(
        "hermes-nb: testing %s with atroposlib's CLI: python %s %s", cls.__name__, args.file, " ".join(cli_args)
    )
    sys.argv = [args.file, *cli_args]  # atroposlib's CLI reads its flags from sys.argv
    cls.cli()  # type: ignore[attr-defined]
    logger.info("hermes-nb: %d group(s) written to %s", rows.count, args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
