# piestream developer commands. README's two commands are `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := UV_PYTHON_DOWNLOADS=never $(BIN)/uv

.PHONY: setup run test check-lock lint unit bench lock clean

$(STAMP): pyproject.toml uv.lock scripts/setup.sh scripts/lock.py
	PY=$(PY) sh scripts/setup.sh
	touch $(STAMP)

## (re)install exactly uv.lock into .venv, also after a hand-installed package
setup:
	PY=$(PY) sh scripts/setup.sh
	touch $(STAMP)

## run piestream's main job on embedded defaults
run: $(STAMP)
	$(BIN)/piestream serve --demo

## lint + type-check + the whole test suite, in an environment that is exactly uv.lock
test: $(STAMP) check-lock lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

## fails when .venv differs from uv.lock (a hand-installed or upgraded package would hide a missing pin)
check-lock: $(STAMP)
	@out=$$($(UV) sync --locked --check --extra dev 2>&1) || { echo "$$out" | grep -v '^Would use' >&2; \
	  echo "make: .venv does not match uv.lock (a package was installed, removed or upgraded by hand," >&2; \
	  echo "      or pyproject.toml changed without 'make lock'). 'make setup' puts back the locked versions." >&2; \
	  exit 1; }

lint: $(STAMP)
	$(BIN)/ruff check src tests bench integrations
	$(BIN)/ruff format --check src tests bench integrations
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not spark" $(PYTEST_ARGS)

## benchmarks need the anchors (rocksdict) of the `bench` extra; `make setup` goes back to dev only
bench: $(STAMP)
	$(UV) sync --locked --quiet --extra dev --extra bench
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b $(BENCH_ARGS) || exit 1; done
	$(UV) sync --locked --quiet --extra dev

## refresh uv.lock on purpose: the newest versions within pyproject.toml's ranges, or only
## PACKAGE's (`make lock PACKAGE=sqlglot`); commit the refresh alone so its CI run proves it
lock: $(STAMP)
	$(UV) lock $(if $(PACKAGE),--upgrade-package $(PACKAGE),--upgrade)
	$(UV) sync --locked --quiet --extra dev

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
