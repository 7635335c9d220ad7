# The two commands a fresh machine needs:
#   make main   set up, then run the quickstart notebook headless: a real training run on the embedded default,
#               writing the executed notebook and the final metrics plot (PNG) to out/
#   make test   set up, then lint, type-check and run the whole test suite
# torch is pinned to the CPU wheel this machine class carries; a looser pin downloads a multi-GB CUDA build.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.installed-stamp

.PHONY: setup main test lint typecheck unit e2e browser bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/ensure_chromium.sh
	sh scripts/ensure_chromium.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q -e ".[train,notebook,dev,browser]" "$(TORCH_PIN)"
	touch $(STAMP)

main: setup
	$(PY) scripts/main_job.py --out out

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	$(VENV)/bin/mypy

unit: setup
	$(VENV)/bin/pytest -q tests/unit

e2e: setup
	$(VENV)/bin/pytest -q tests/e2e

browser: setup
	$(VENV)/bin/pytest -q tests/browser

test: lint typecheck
	$(VENV)/bin/pytest -q

bench: setup
	$(PY) bench/discovery.py
	$(PY) bench/startup.py
	$(PY) bench/learning.py
	$(PY) bench/notebook.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
