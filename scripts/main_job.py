"""The README's main job (``make main``): run notebooks/quickstart.ipynb headless on the embedded default.

    .venv/bin/python scripts/main_job.py --out out

Writes ``<out>/quickstart.ipynb`` (the executed notebook, final plot included) and ``<out>/metrics.png`` (the
run's final metrics plot); runs and logs go to ``<out>/home`` (``HERMES_NB_HOME``). Shows progress on stderr
(the cells, then the run's step / total, held-out accuracy and ETA), then prints the paths and the final and
best metrics. Exits 1 when the notebook fails or its run does not complete.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO_ROOT / "notebooks" / "quickstart.ipynb"
# The metrics the README quotes; the rest are in the run's metrics.jsonl and the executed notebook.
SHOWN_METRICS = ("train/reward_mean", "train/percent_correct", "eval/percent_correct", "train/loss")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK, help="notebook to execute (default: quickstart)")
    parser.add_argument(
        "--total-steps", type=int, default=None, help="a shorter (or longer) run than configs/quickstart.yaml's"
    )
    return parser.parse_args(argv)


def format_metrics(title: str, metrics: dict[str, float]) -> list[str]:
    shown = [key for key in SHOWN_METRICS if key in metrics]
    return [f"{title}:"] + [f"  {key} = {metrics[key]:.4g}" for key in shown]


def stop_leftover_runs(run_ids: list[str]) -> None:
    """A notebook that failed mid-run leaves a detached run going; the job must not leave processes behind."""
    from hermes_nb.api import rl_stop_training

    for run_id in run_ids:
        asyncio.run(rl_stop_training(run_id))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    home_dir = out / "home"
    # Set before hermes_nb reads it: this process and the notebook's kernel share the one home.
    os.environ["HERMES_NB_HOME"] = str(home_dir)
    from hermes_nb.api import rl_get_results
    from hermes_nb.notebook.headless.execution import execute_notebook
    from hermes_nb.notebook.headless.terminal_progress import display_for, show_progress
    from hermes_nb.plotting.plot import save_metrics_plot
    from hermes_nb.runs.run_dirs import known_run_ids

    before = set(known_run_ids())
    print(f"executing {args.notebook} (home {home_dir}) ...", flush=True)
    parameters = {"overrides": {"total_steps": args.total_steps}} if args.total_steps else None
    display = display_for(sys.stderr)
    with show_progress(before, display):
        execution = execute_notebook(
            args.notebook,
            out / args.notebook.name,
            cwd=args.notebook.parent,
            parameters=parameters,
            on_cell=display.show_cell,
        )
    new_runs = [run_id for run_id in known_run_ids() if run_id not in before]
    stop_leftover_runs(new_runs)
    print(f"executed notebook: {execution.output} ({execution.seconds:.0f} s)")
    if not execution.ok:
        print(f"error: the notebook failed: {execution.error}", file=sys.stderr)
        return 1
    if not new_runs:
        print("error: the notebook started no run", file=sys.stderr)
        return 1
    run_id = sorted(new_runs)[-1]
    results = asyncio.run(rl_get_results(run_id))
    plot = save_metrics_plot([run_id], out / "metrics.png")
    print(f"metrics plot: {plot}")
    print(f"run {run_id}: {results.status}; run directory {home_dir / 'runs' / run_id}")
    print("\n".join(format_metrics("final metrics", results.final_metrics)))
    print("\n".join(format_metrics("best metrics", results.best_metrics)))
    if results.status != "completed":
        print(f"error: run {run_id} ended {results.status}, not completed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
