"""`import hermes_nb` is fast and imports no heavy dependency."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "wandb", "fastapi", "uvicorn", "matplotlib", "ipywidgets", "IPython", "httpx")
# The budget is for the whole `import hermes_nb`; the interpreter's own start-up is measured apart and removed.
# It is the process's CPU time: on two shared cores the wall time mostly measures the other processes.
IMPORT_BUDGET_S = 0.3

PROBE = """
import json, sys, time
start = time.process_time()
import hermes_nb
elapsed = time.process_time() - start
print(json.dumps({"elapsed": elapsed, "modules": sorted(sys.modules)}))
"""


def probe(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=True
    )
    data: dict[str, object] = json.loads(out.stdout)
    return data


def test_import_is_fast() -> None:
    # Best of three: the machine is shared, and one slow start says nothing about the import itself.
    best = min(float(probe(PROBE)["elapsed"]) for _ in range(3))  # type: ignore[arg-type]
    assert best < IMPORT_BUDGET_S, f"import hermes_nb took {best:.3f} s"


def test_import_loads_no_heavy_module() -> None:
    modules = set(probe(PROBE)["modules"])  # type: ignore[call-overload]
    assert not {m for m in modules if m.split(".")[0] in HEAVY}


def test_the_core_api_loads_no_heavy_module() -> None:
    code = PROBE.replace("import hermes_nb\n", "import hermes_nb\nhermes_nb.rl_list_environments\nhermes_nb.tools\n")
    code = code.replace("hermes_nb.tools\n", "import hermes_nb.tools, hermes_nb.cli\n")
    modules = set(probe(code)["modules"])  # type: ignore[call-overload]
    assert not {m for m in modules if m.split(".")[0] in HEAVY}
