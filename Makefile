# The two commands a fresh machine needs:
#   make main   set up, then run the quickstart notebook headless: a real training run on the embedded default,
#               writing the executed notebook and the final metrics plot (PNG) to out/
#   make test   set up, then lint, type-check, build the docs site strictly and run the whole test suite
# torch is pinned to the CPU wheel this machine class carries; a looser pin downloads a multi-GB CUDA build.
# Every extra that depends on torch (train, lora: peft) is installed after it, with the pin repeated, so pip keeps
# the CPU torch it finds instead of resolving a CUDA one.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.installed-stamp

.PHONY: setup warm-up side-envs main test test-learning lint typecheck docs unit e2e browser bench dist clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/ensure_chromium.sh
	sh scripts/ensure_chromium.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -e ".[train,lora,notebook,dev,browser,tinker,environments,docs]" "$(TORCH_PIN)"
	$(MAKE) warm-up
	touch $(STAMP)

# First-use work done once here, not in a user's first kernel (nor the browser test's first run, whose widget
# waits it once overran): byte-code of the package, matplotlib's font cache, and the notebook stack, torch and
# transformers read once, so that a first kernel and a first trainer find them in the OS's file cache.
warm-up:
	$(PY) -m compileall -q hermes_nb
	$(PY) -c "import hermes_nb.notebook, ipykernel.kernelapp, jupyterlab, torch, transformers"

# Side environments the tests need (scripts/side_envs/NAME.txt -> .venvs/NAME), cached by a stamp; CI builds them anew.
# The largest first: an install's downloads stay on disk until it ends, so they come while the least is there.
LARGEST_SIDE_ENVS := skyrl vllm
SIDE_ENVS := $(LARGEST_SIDE_ENVS) $(filter-out $(LARGEST_SIDE_ENVS),$(basename $(notdir $(wildcard scripts/side_envs/*.txt))))

side-envs:
	for name in $(SIDE_ENVS); do sh scripts/side_env.sh "$$name" >/dev/null || exit 1; done

main: setup
	$(PY) scripts/main_job.py --out out

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	$(VENV)/bin/mypy

# The docs site into site/, strict: a broken link or anchor, a page missing from the nav, or a public command
# without a docstring (scripts/docs_hooks.py) fails it.
docs: setup
	$(VENV)/bin/mkdocs build --strict

unit: setup
	$(VENV)/bin/pytest -q tests/unit

e2e: setup
	$(VENV)/bin/pytest -q tests/e2e

browser: setup
	$(VENV)/bin/pytest -q tests/browser

# --durations: the slowest tests printed after every full run, to keep the suite within its 40 minutes.
test: lint typecheck docs side-envs
	$(VENV)/bin/pytest -q --durations=25

# The learning measurements too long for the suite's budget (pyproject's `learning_long` marker).
test-learning: setup side-envs
	$(VENV)/bin/pytest -q -m learning_long

# The bench extra adds what only benchmarks import (TRL for bench/vs_trl.py); installed once, like set-up.
BENCH_STAMP := $(VENV)/.bench-stamp

bench: $(BENCH_STAMP) side-envs
	$(PY) bench/discovery.py
	$(PY) bench/startup.py
	$(PY) bench/learning.py
	$(PY) bench/notebook.py
	$(PY) bench/ingest.py

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[bench]" "$(TORCH_PIN)"
	touch $(BENCH_STAMP)

# The release files: the sdist, then a wheel built from it (python -m build), their metadata checked by twine.
dist: setup
	rm -rf dist
	$(PY) -m build
	$(VENV)/bin/twine check --strict dist/*

clean:
	rm -rf $(VENV) .venvs out site dist .pytest_cache .mypy_cache .ruff_cache
