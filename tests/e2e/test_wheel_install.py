"""The package as a pip user gets it: a wheel built from this checkout (and one built from its sdist), installed,
not editable, into a fresh virtual environment outside the repository, used from a temporary directory. It must
carry what the clone has: the shipped environments, the configs (loaded by name), the example notebooks, and
train arithmetic to ``completed``.

The fresh venv reuses the installed dependencies (torch, transformers, ...) through a ``.pth`` line naming this
interpreter's site-packages, after its own: the wheel's hermes_nb is the one imported, and no download is needed.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
# What pyproject.toml builds from.
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "hermes_nb", "environments", "configs", "notebooks")
NOT_BUILT = shutil.ignore_patterns("__pycache__", "*.pyc")
BUILD_TIMEOUT_S = 300.0
CALL_TIMEOUT_S = 120.0
# Two quick-test steps with their start-up on two busy cores.
RUN_TIMEOUT_S = 300.0
SHORT_RUN = ["total_steps=2", "group_size=4", "batch_size=16", "eval_items=20", "steps_per_eval=2", "max_num_workers=2"]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = BUILD_TIMEOUT_S) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _pip_wheel(source: Path, out: Path) -> Path:
    # No build isolation: the build backend installed here (setuptools) builds it, with no index to reach.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
         cwd=out)  # fmt: skip
    (wheel,) = out.glob("hermes_nb-*.whl")
    return wheel


def _checkout(tmp: Path) -> Path:
    """What the build reads, copied as it is (the _shipped links stay links): a build writes build/ and
    *.egg-info beside its sources, which must not land in the checkout the other tests import from."""
    source = tmp / "checkout"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name, symlinks=True, ignore=NOT_BUILT)
        else:
            shutil.copy2(REPO_ROOT / name, source / name)
    return source


def _sdist(source: Path, out: Path) -> Path:
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    name = _run([sys.executable, "-c", code], cwd=source).strip().splitlines()[-1]
    return out / name


def _wheel(kind: str, tmp: Path) -> Path:
    """A wheel from the checkout, or from the sdist built from the checkout."""
    source = _checkout(tmp)
    if kind == "checkout":
        return _pip_wheel(source, tmp)
    return _pip_wheel(_sdist(source, tmp / "sdist"), tmp)


def _venv_with(wheel: Path, where: Path, env: dict[str, str]) -> Path:
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)], cwd=where.parent, env=env)
    python = where / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
         cwd=where.parent, env=env)  # fmt: skip
    own = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=where).strip())
    (own / "installed_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    return where


@pytest.mark.parametrize("kind", ["checkout", "sdist"])
def test_an_installed_wheel_lists_loads_by_name_copies_examples_and_trains(kind: str, tmp_path: Path) -> None:
    # Nothing of the checkout on the path: only what the wheel installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HERMES_NB_HOME"] = str(tmp_path / "home")
    (tmp_path / "dist").mkdir()
    venv = _venv_with(_wheel(kind, tmp_path / "dist"), tmp_path / "venv", env)
    work = tmp_path / "work"  # the user's folder: no environments/, configs/ or notebooks/ here
    work.mkdir()

    def hermes_nb(*args: str, timeout: float = CALL_TIMEOUT_S) -> str:
        return _run([str(venv / "bin" / "hermes-nb"), *args], cwd=work, env=env, timeout=timeout)

    code = "import hermes_nb as h, importlib.metadata as m; print(h.__file__, h.__version__, m.version('hermes-nb'))"
    where, version, installed = _run([str(venv / "bin" / "python"), "-c", code], work, env).split()
    assert where.startswith(str(venv)), where
    assert version == installed  # one source: pyproject.toml reads hermes_nb.__version__
    listed = json.loads(hermes_nb("list", "--json"))
    files = {e["name"]: e["file_path"] for e in listed["environments"]}
    assert "arithmetic" in files and files["arithmetic"].startswith(str(venv)), files
    hermes_nb("select", "arithmetic")
    assert "env.total_steps: 100 -> 1400" in hermes_nb("load", "quickstart")
    assert "quickstart.ipynb" in hermes_nb("examples", "notebooks")
    assert (work / "notebooks" / "quickstart.ipynb").is_file()

    run_id, _, final = hermes_nb("start", *SHORT_RUN, "--wait", "--json", timeout=RUN_TIMEOUT_S).partition("\n")
    assert json.loads(final)["status"] == "completed", final
    assert (tmp_path / "home" / "runs" / run_id.strip() / "config.yaml").is_file()
