"""``python -m hermes_nb.env {serve,process,evaluate} path/to/env.py[:Class] ...``

The one place that resolves an environment file to its class (``hermes_nb.env.loading``) before running it:
``hermes_nb.env.cli``, which ``BaseEnv.cli()`` also uses, takes the class as given.
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_nb.env.cli import build_parser, run
from hermes_nb.env.loading import load_env_class


def main(argv: Sequence[str] | None = None) -> int:
    """The environment file comes first after the subcommand."""
    args = build_parser(with_spec=True).parse_args(argv)
    return run(args, lambda: load_env_class(args.spec))


if __name__ == "__main__":
    raise SystemExit(main())
