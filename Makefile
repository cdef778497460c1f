# tfprof-towers — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# TensorFlow flavour: auto (GPU build when `nvidia-smi -L` lists a GPU, else CPU), cpu or gpu.
TF ?= auto
TF_RESOLVED := $(if $(filter auto,$(TF)),$(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu),$(TF))
# Arguments passed to `tfprof-towers profile` by `make profile`.
ARGS ?=
PORT ?= 6006
# pytest-xdist workers for `make test` and `make test-fast`: auto (one per CPU this process may use),
# a number, or 0 (no workers: everything in one process).
WORKERS ?= auto
# pytest with bytecode cached in __pycache__ (git-ignored) even where the environment sets
# PYTHONDONTWRITEBYTECODE: without the cache every xdist worker, and every child that imports the
# package, compiles it again, and pytest rewrites every test module's asserts again (measured: the
# fast tier's CPU 128 s -> 84 s on this 2-core machine, once the cache is warm).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
STAMP := $(VENV)/.installed-$(TF_RESOLVED)

.DEFAULT_GOAL := help
.PHONY: help install profile test test-fast lint tensorboard bench bench-memory bench-parse bench-startup bench-corpus bench-hosts bench-calibration bench-keras clean browser

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}'
	@echo "  variables: TF=auto|cpu|gpu (TensorFlow build, now: $(TF_RESOLVED)), ARGS='...' for make profile/bench/bench-parse, PORT=$(PORT), WORKERS=$(WORKERS) (pytest-xdist)"

install: $(STAMP) ## create .venv and install the package with its dependencies (quick when nothing changed)

$(STAMP): pyproject.toml setup.py tfprof_towers/xplane/_wirec.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(TF_RESOLVED),dev]"
	@rm -f $(VENV)/.installed-*
	@touch $@

profile: install ## run the default profile (all built-in variants) and print where the report is
	$(BIN)/tfprof-towers profile $(ARGS)

# Both tiers on pytest-xdist; the e2e tier a file per worker at a time (--dist loadfile: a file's
# module fixtures are made once), the longest files first in the order tests/conftest.py gives them
# (--no-loadscope-reorder), the runs several files read made once per session (tests/conftest.py).
test: install browser ## run the whole test suite: the fast tier, then the end-to-end tier (on xdist)
	$(PYTEST) -q tests/unit -n $(WORKERS) --durations=15
	$(PYTEST) -q tests/e2e -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

test-fast: install ## run the fast tier (tests/unit: no TensorFlow child, no subprocess of the tool)
	$(PYTEST) -q tests/unit -n $(WORKERS) --durations=15

lint: install ## ruff
	$(BIN)/ruff check .

tensorboard: install ## serve the latest run's TensorBoard logdir on 127.0.0.1 (PORT=6006)
	@test -d reports/latest/tensorboard || { echo "no run yet: make profile first"; exit 1; }
	$(BIN)/tensorboard --logdir reports/latest/tensorboard --host 127.0.0.1 --port $(PORT)

bench: install ## measure the harness's own cost (writes reports/bench.json)
	$(BIN)/python -m benchmarks.bench $(ARGS)

bench-memory: install ## memory estimate vs measured per built-in and device at the cpu preset; the host BFC allocator's cost
	$(BIN)/python -m benchmarks.bench_memory $(ARGS)

bench-parse: install ## trace-parsing speed on a synthetic trace of 1M+ events
	$(BIN)/python -m benchmarks.bench_parse $(ARGS)

bench-startup: install ## what analyze --help and analyze FILE --json import, and at what cost (ARGS='--code DIR': a before)
	$(BIN)/python -m benchmarks.bench_startup $(ARGS)

bench-keras: install ## project ResNet-50 (keras.applications) on 8 GPUs under two strategies: the whole command's time
	$(BIN)/python -m benchmarks.bench_keras $(ARGS)

bench-corpus: install ## analyze and XProf side by side on every real trace of ../shared/fixtures (or ARGS='DIR ...')
	$(BIN)/python -m benchmarks.bench_corpus $(ARGS)

browser: ## install Debian's chromium for the headless report tests (skipped where apt is absent)
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium not installed: browser tests will be skipped"; }

clean: ## remove the virtual environment, caches and generated reports
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info tests/output
	find reports -mindepth 1 ! -name .gitkeep ! -name README.md -exec rm -rf {} +
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

bench-hosts: install ## multi-host analyze at pod scale: N hosts x M events, pool, Dask, scaling (ARGS='--quick')
	$(BIN)/python -m benchmarks.bench_hosts $(ARGS)
bench-calibration: install ## the cost model against the published TensorFlow Benchmarks page (ResNet-50, Inception V3, VGG16 on P100/K80)
	$(BIN)/python -m benchmarks.bench_calibration $(ARGS)
