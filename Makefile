# rltel: set up a virtual environment from nothing, run the demo, run the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
# AReaL's released wheel, the peer of the conformance tests (tests/conformance): installed
# without its dependencies (ray, vLLM, ...); the tests load its modules by file path.
AREAL_VERSION := 1.0.4
STAMP := $(VENV)/.rltel-installed

.PHONY: venv system-deps demo test stack-test test-under-load lint format mutation bench bench-compare gpu-check reliability clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || { PYTHON=$(PYTHON) bash scripts/system-deps build && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	# torch pinned: an unpinned torch may pull a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps areal==$(AREAL_VERSION)
	touch $(STAMP)

demo: venv
	$(VENV)/bin/rltel demo

# The tests start real prometheus, promtool, prometheus-alertmanager and openssl: installed
# here when missing (as root with apt-get), else one line says what to install.
system-deps:
	@bash scripts/system-deps test

# Three pytest-xdist workers: most of the suite waits on real servers and processes, so
# three overlap well on two cores (about 10 minutes instead of 16 on two idle cores).
TEST_WORKERS ?= 3

test: system-deps venv
	RLTEL_NO_SKIPS=1 $(PY) -m pytest -q -n $(TEST_WORKERS)

# The docker-compose stack on a real Docker engine (tests/stack, not part of `make test`):
# installs docker.io, debootstrap and the pinned Compose plugin when missing, starts a
# dockerd of its own, builds stand-ins for the public images from Debian's packages, runs
# docker-compose.yml through dashboards/compose/stand-ins.yml and checks it from the host.
# About 4 minutes with a warm build cache, 7 from nothing (docs/development.md).
stack-test: venv
	bash scripts/stack-test

# The suite three times while stress-ng keeps every core busy (CI shares its cores): a test
# that passes only on a quiet machine fails here.
test-under-load: system-deps venv
	@bash scripts/system-deps load
	bash scripts/test-under-load

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Mutation testing of the core modules (cosmic-ray, in a clone of HEAD): about 7 to 8 hours on 2 cores,
# not part of make test; see docs/development.md for the last scores.
mutation: venv
	$(PY) -c "import cosmic_ray" 2>/dev/null || $(PY) -m pip install --quiet "cosmic-ray==8.7.0"
	bash scripts/mutation

bench: venv
	$(PY) bench/record_bench.py

# Issue 41's delivery path against the tree before it (bench/compare_trees.py): the record,
# commit/export, collector and Prometheus benches of a git worktree of ce7237e and of this
# checkout, alternately, 3 rounds; one table of medians, new/old and each side's spread
# (docs/BENCHMARKS.md). About 7 minutes on 2 idle cores; BENCH_COMPARE_ARGS="--rounds 5".
bench-compare: venv
	$(PY) bench/compare_trees.py $(BENCH_COMPARE_ARGS)

# rltel's CUDA, NCCL and NVML paths in one command (scripts/gpu-check, bench/gpu_check): one
# line per check, then "N passed, N failed, N skipped"; sized for 6 minutes on one GPU (not
# yet run on one). Without CUDA the checks with a CPU meaning run on the CPU (30-50 s here).
gpu-check: venv
	bash scripts/gpu-check

# The reliability ledger (bench/reliability.py): collector SIGKILL/SIGTERM, a trainer killed
# into an outage, a close with a spool backlog then rltel spool flush; every acknowledged step
# looked up in TensorBoard, W&B offline and a real Prometheus (remote write), 5 runs each
# (10-17 minutes here, under load); exit 1 when a step was lost or duplicated. Not in make test.
reliability: venv
	$(PY) bench/reliability.py

clean:
	rm -rf $(VENV) build *.egg-info
