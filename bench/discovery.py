"""Benchmark environment discovery: 1,000 generated environment files, cold and warm scan times.

    .venv/bin/python bench/discovery.py [--files 1000] [--repeat 5]

Cold = first scan of a tree this process has not seen (every file parsed); warm = the same tree again
(one ``stat`` per file, nothing parsed). The peer, measured in the same run on the same tree, is what a naive
scanner does: import every file and look for ``BaseEnv`` subclasses (as the Hermes RL tool reads its
environments). Timings are reported as ratios against that peer, since the machine is
shared. Targets on two cores: cold <= 1 s, warm <= 50 ms. Each file looks like
a small real environment (imports, a config class, an environment class with a docstring and methods).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_nb.selection import discovery, installed  # after the path set-up, so it runs from a fresh clone

TEMPLATE = '''"""Generated task {i}: answer arithmetic question {i}."""
from __future__ import annotations

import random

from pydantic import Field

from hermes_nb.env import BaseEnv, BaseEnvConfig, QAItem


class Task{i}Config(BaseEnvConfig):
    difficulty: int = Field(default={d}, ge=1, le=9, description="How hard the problems are.")


class Task{i}Env(BaseEnv):
    """Task {i}: add numbers of up to {d} digits."""

    name = "task_{i}"
    env_config_cls = Task{i}Config

    async def setup(self) -> None:
        self.rng = random.Random(self.config.seed)

    async def get_next_item(self) -> QAItem:
        a, b = self.rng.randint(0, 10**{d}), self.rng.randint(0, 10**{d})
        return QAItem(prompt=f"{{a}}+{{b}}=", answer=str(a + b))

    async def collect_trajectories(self, item):
        completions = await self.server.sample(item.prompt, n=self.config.group_size)
        scores = [1.0 if c.text.strip() == item.answer else 0.0 for c in completions]
        return None, []
'''


def generate(directory: Path, count: int) -> None:
    for i in range(count):
        (directory / f"task_{i:04d}.py").write_text(TEMPLATE.format(i=i, d=1 + i % 6), encoding="utf-8")


def timed_scan(directory: Path) -> tuple[float, int]:
    start = time.perf_counter()
    environments, errors = discovery.scan([directory])
    elapsed = time.perf_counter() - start
    if errors:
        raise SystemExit(f"unexpected scan errors: {errors[:3]}")
    # Packages installed into a framework's Python are listed too, wherever the path points: not this tree's.
    return elapsed, sum(1 for e in environments if Path(e.file).is_relative_to(directory))


def installed_listing() -> float:
    """The frameworks' Pythons asked for their installed environment packages, from nothing cached."""
    installed.clear_cache()
    start = time.perf_counter()
    discovery.scan([])
    return time.perf_counter() - start


def import_scan(directory: Path) -> float:
    """The peer: import each file as a module and collect its BaseEnv subclasses."""
    import importlib.util

    from hermes_nb.env import BaseEnv

    start = time.perf_counter()
    found = 0
    for path in sorted(directory.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found += sum(
            1 for v in vars(module).values() if isinstance(v, type) and issubclass(v, BaseEnv) and v is not BaseEnv
        )
    elapsed = time.perf_counter() - start
    assert found >= 1
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="cold and warm measurements, each on a fresh tree")
    args = parser.parse_args()
    cold: list[float] = []
    warm: list[float] = []
    peer: list[float] = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="hermes_nb_bench_") as tmp:
            directory = Path(tmp)
            generate(directory, args.files)
            discovery.clear_cache()
            elapsed, found = timed_scan(directory)
            assert found == args.files, f"found {found} of {args.files} environments"
            cold.append(elapsed)
            warm += [timed_scan(directory)[0] for _ in range(5)]
            peer.append(import_scan(directory))
    print(f"discovery of {args.files} environment files ({args.repeat} trees)")
    print(f"  installed packages asked of the frameworks' Pythons: {installed_listing() * 1000:8.1f} ms (once per")
    print("  Python until its site-packages changes; part of the first tree's cold scan)")
    for label, times, target in (("cold", cold, 1000), ("warm", warm, 50)):
        median, worst = statistics.median(times) * 1000, max(times) * 1000
        print(f"  {label} scan: median {median:8.1f} ms  (max {worst:.1f} ms)  target <= {target} ms")
    peer_median = statistics.median(peer)
    print(f"  peer (import every file): median {peer_median * 1000:8.1f} ms")
    print(
        f"  ratio cold / peer: {statistics.median(cold) / peer_median:.3f}   "
        f"ratio warm / peer: {statistics.median(warm) / peer_median:.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
