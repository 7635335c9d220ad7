"""``python -m hermes_nb.env_host {serve,process,evaluate} path/to/env.py[:Class] ...``

How a run starts its environment, and where ``MyEnv.cli()`` hands over. The one place that resolves an environment
file to its class (``hermes_nb.env_host.loading``) before ``hermes_nb.env_host.cli`` runs it.
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_nb.env_host.cli import build_parser, run
from hermes_nb.env_host.loading import load_env_class


def main(argv: Sequence[str] | None = None) -> int:
    """The environment file comes first after the subcommand."""
    args = build_parser().parse_args(argv)
    return run(args, lambda: load_env_class(args.spec))


if __name__ == "__main__":
    raise SystemExit(main())
