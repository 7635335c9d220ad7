"""Benchmark the live metrics plot: redraw time at 10,000 points, and what a refreshing plot costs a cell.

    .venv/bin/python bench/notebook.py [--points 10000] [--cells 300] [--skip-kernel]

1. Redraw (target <= 100 ms): a four-panel figure holding 10,000 steps, one new step per redraw. "steady" is
   the usual frame (cached axes, lines moved with set_data, a blit); "axes" is a frame whose axis limits had to
   grow (everything drawn again, a few times per run); the peer is the straightforward way: a new figure,
   plot(), savefig, every frame.
2. Cell latency (target <= +10 ms): a real kernel (jupyter_client) runs a trivial cell (``pass``) again and
   again, first alone, then while a LivePlot in the same kernel redraws every second from its thread because
   this process appends a row to the run's metrics.jsonl every 200 ms. Cells are spaced at random so they fall
   on every phase of the refresh cycle.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from matplotlib.backends.backend_agg import FigureCanvasAgg  # after the path set-up
from matplotlib.figure import Figure

from hermes_nb.plotting.figure import PANELS, PLOTTED_KEYS, MetricsFigure
from hermes_nb.plotting.series import RunSeries
from hermes_nb.protocol.metrics import MetricsRow

RUN_ID = "20260101-000000-benchbench"


def row(step: int) -> MetricsRow:
    rng = random.Random(step)
    return MetricsRow(
        step=step, time=float(step), values={k: 1 - 1 / (1 + step / 500) + rng.random() / 10 for k in PLOTTED_KEYS}
    )


def timed(action: Callable[[], object], repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds per call. CPU time is the one to read on a shared machine: other processes
    stretch the wall time, not this process's CPU time."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        action()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return wall, cpu


def summary(label: str, ms: list[float], cpu: list[float] | None = None) -> float:
    ms = sorted(ms)
    median = statistics.median(ms)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    cpu_text = f"   cpu median {statistics.median(cpu):7.1f} ms" if cpu else ""
    print(f"  {label:<34} median {median:7.1f} ms   p95 {p95:7.1f} ms{cpu_text}   (n={len(ms)})")
    return statistics.median(cpu) if cpu else median


def naive_redraw(series: RunSeries) -> bytes:
    figure = Figure(figsize=(10, 6.4), dpi=80, layout="constrained")
    FigureCanvasAgg(figure)
    for ax, panel in zip(figure.subplots(2, 2).flat, PANELS, strict=True):
        ax.plot(*series.arrays(panel.key))
        ax.set_title(panel.title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def bench_redraw(points: int, smoothing: float) -> float:
    series = RunSeries(PLOTTED_KEYS)
    series.add_rows(row(step) for step in range(points))
    figure = MetricsFigure(["run"], smoothing=smoothing)
    figure.update({"run": series})
    figure.render_png()  # first frame: fonts and caches
    next_step = iter(range(points, points + 10_000))

    def steady() -> None:
        series.add_rows([row(next(next_step))])
        figure.update({"run": series})
        figure.render_png()

    def axes_changed() -> None:
        steady()
        figure._background = None  # as when a limit grows
        figure.render_png()

    print(f"redraw, {points:,} steps x 4 panels, smoothing {smoothing}:")
    median = summary("steady (blit, set_data)", *timed(steady, 40))
    summary("axes limits grew (full draw)", *timed(axes_changed, 10))
    peer = summary("peer: new figure + savefig", *timed(lambda: naive_redraw(series), 5))
    print(f"  steady redraw uses {peer / median:.1f}x less CPU than the peer")
    growing_run(points, smoothing)
    return median


def growing_run(points: int, smoothing: float, frames: int = 100) -> None:
    """A run from 0 to ``points`` steps seen in ``frames`` refreshes: how often the axes had to be redrawn."""
    series = RunSeries(PLOTTED_KEYS)
    figure = MetricsFigure(["run"], smoothing=smoothing)
    chunk = points // frames
    steps = iter(range(0, points, chunk))

    def frame() -> None:
        first = next(steps)
        series.add_rows(row(step) for step in range(first, first + chunk))
        figure.update({"run": series})
        figure.render_png()

    wall, cpu = timed(frame, frames)
    print(
        f"  growing run, 0 -> {points:,} steps in {frames} frames: {figure.full_redraws} full draws, "
        f"mean frame {statistics.mean(wall):.1f} ms wall / {statistics.mean(cpu):.1f} ms cpu"
    )


KERNEL_SETUP = """
from hermes_nb.notebook import LivePlot
plot = LivePlot([{run!r}], interval_s=1.0).start()
"""


def cell_latency(kc: object, cells: int) -> list[float]:
    out = []
    for _ in range(cells):
        time.sleep(random.uniform(0.0, 0.06))
        start = time.perf_counter()
        kc.execute_interactive("pass", store_history=False, output_hook=lambda msg: None)  # type: ignore[attr-defined]
        out.append((time.perf_counter() - start) * 1000)
    return out


def bench_kernel(points: int, cells: int) -> None:
    import threading

    from jupyter_client.manager import start_new_kernel

    from hermes_nb.runs.state import RunState, write_run_state

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        run_dir = home / "runs" / RUN_ID
        run_dir.mkdir(parents=True)
        write_run_state(run_dir, RunState(run_id=RUN_ID, environment="bench", status="running", total_steps=10**6))
        metrics = run_dir / "metrics.jsonl"
        metrics.write_text("".join(row(step).to_json_line() for step in range(points)), encoding="utf-8")
        env = {**os.environ, "HERMES_NB_HOME": str(home), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        km, kc = start_new_kernel(kernel_name="python3", env=env)
        stop = threading.Event()
        try:
            kc.execute_interactive("import hermes_nb.notebook", output_hook=lambda msg: None)
            for _ in range(20):  # warm-up
                kc.execute_interactive("pass", output_hook=lambda msg: None)
            print(f"trivial cell in a real kernel ({cells} cells, random spacing):")
            alone = summary("alone", cell_latency(kc, cells))
            kc.execute_interactive(KERNEL_SETUP.format(run=RUN_ID), output_hook=lambda msg: None)

            def writer() -> None:
                step = points
                while not stop.wait(0.2):
                    with metrics.open("a", encoding="utf-8") as handle:
                        handle.write(row(step).to_json_line())
                    step += 1

            threading.Thread(target=writer, daemon=True).start()
            time.sleep(2.0)
            started = time.perf_counter()
            busy = cell_latency(kc, cells)
            elapsed = time.perf_counter() - started
            with_plot = summary("while the plot refreshes", busy)
            summary_mean = statistics.mean(busy) - statistics.mean(cell_latency(kc, cells))
            frames: list[str] = []
            kc.execute_interactive(
                "print(plot.plot.frames)", output_hook=lambda m: frames.append(m["content"].get("text", ""))
            )
            print(
                f"  extra latency: median {with_plot - alone:+.1f} ms, mean {summary_mean:+.1f} ms "
                f"({''.join(frames).strip()} frames drawn in the kernel, {elapsed:.0f} s of cells)"
            )
            kc.execute_interactive("plot.close()", output_hook=lambda msg: None)
        finally:
            stop.set()
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--cells", type=int, default=300)
    parser.add_argument("--skip-kernel", action="store_true")
    args = parser.parse_args()
    bench_redraw(args.points, smoothing=0.0)
    bench_redraw(args.points, smoothing=0.6)
    if not args.skip_kernel:
        bench_kernel(args.points, args.cells)


if __name__ == "__main__":
    main()
