# paddleray: every developer and CI entry point. Set-up is automatic and idempotent: any target
# that needs the virtual env creates or updates it first (only when pyproject.toml changed).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
EXTRAS := cpu,onnx,test,bench,dev,demo
PYTEST_ARGS ?=
# pipefail: the install's output goes through a filter (below) without hiding its exit status.
SHELL := bash
.SHELLFLAGS := -o pipefail -c
# This machine's pip configuration lists a local index folder (file:///opt/pypi-more/simple)
# that lacks most projects; pip says so once per package. Those lines, and nothing else, are
# dropped. The build backend's note that an editable install was made is silenced by name.
PIP_NOISE := ^WARNING: Location 'file://[^']*' is ignored: it is neither a file nor a directory\.$$
PIP := $(BIN)/python -W "ignore:Editable installation:UserWarning" -m pip

.PHONY: demo test setup protos protos-check lint bench up down status clean triton-venv reliability reliability-soak reliability-report

demo: setup ## the main job: the full local demo (Redis, Ray, the three services)
	$(BIN)/paddleray demo

test: setup protos-check lint ## everything CI checks
	$(BIN)/pytest $(PYTEST_ARGS)

setup: $(STAMP) redis-server cjk-font

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing paddleray[$(EXTRAS)] into $(VENV) (about a minute) ..."
	@$(PIP) install -q --upgrade pip 2>&1 | { grep -v "$(PIP_NOISE)" || true; }
	@$(PIP) install -q -e ".[$(EXTRAS)]" 2>&1 | { grep -v "$(PIP_NOISE)" || true; }
	@rm -f $(VENV)/.installed-* && touch $@

# The stack and the tests start redis-server processes of their own.
.PHONY: redis-server
redis-server:
	@command -v redis-server >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; \
	  else echo "redis-server is missing: sudo apt-get install -y redis-server"; exit 1; fi; }

# The text-line example (services/trainer/examples/crnn.py) renders its lines with a CJK font
# from Debian (the smallest of them: 1.6 MB).
CJK_FONT_PACKAGE := fonts-wqy-microhei
CJK_FONT := /usr/share/fonts/truetype/wqy/wqy-microhei.ttc
.PHONY: cjk-font
cjk-font:
	@test -f $(CJK_FONT) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq $(CJK_FONT_PACKAGE) >/dev/null; \
	  else echo "$(CJK_FONT_PACKAGE) is missing: sudo apt-get install -y $(CJK_FONT_PACKAGE)"; exit 1; fi; }

protos: $(STAMP) ## regenerate gen/python from protos/
	$(BIN)/python scripts/gen_protos.py

protos-check: $(STAMP) ## fail when gen/python is stale
	$(BIN)/python scripts/gen_protos.py --check

lint: $(STAMP) ## ruff, mypy over services/ and bench/, buf lint, and buf breaking against main when main has protos
	$(BIN)/ruff check services bench tests scripts
	$(BIN)/python scripts/typecheck.py
	$(BIN)/python scripts/typecheck.py bench
	cd protos && ../$(BIN)/buf lint
	@if git rev-parse --verify -q main >/dev/null && git cat-file -e main:protos/buf.yaml 2>/dev/null; then \
	  cd protos && ../$(BIN)/buf breaking --against '../.git#branch=main,subdir=protos'; fi

# The stock tritonclient pins protobuf < 7, so the serving tests run it from a venv of its own
# (they create it on first use too).
triton-venv: setup ## .venv-triton with tritonclient[grpc,http] for the stock-client tests
	$(BIN)/python -c "import sys; sys.path.insert(0, 'tests'); from support.triton import triton_python; triton_python()"

bench: setup ## every benchmark, quick; results in bench/results, report in bench/REPORT.md
	$(BIN)/python -m bench all --quick

reliability: setup ## the reliability suite at CI size (fuzzing every RPC, 2,000 jobs of load; about 90 s)
	$(BIN)/pytest tests/reliability $(PYTEST_ARGS)

reliability-soak: setup ## the reliability suite in soak mode (>= 10,000 fuzzed requests per service, 10,000 jobs of load), then the report
	PADDLERAY_SOAK=1 $(BIN)/pytest tests/reliability $(PYTEST_ARGS)
	$(MAKE) reliability-report

reliability-report: setup ## docs/reliability.md from tests/reliability/results/ (fuzz: a soak run's, else the report's own; load, faults, auth)
	$(BIN)/python -m tests.reliability.report

up: setup ## start the local stack in the background
	$(BIN)/paddleray up

down: ## stop the local stack
	$(BIN)/paddleray down

status:
	$(BIN)/paddleray status

clean:
	rm -rf $(VENV) .paddleray
