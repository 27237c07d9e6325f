# piestream developer commands. README's two commands are `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint unit bench clean

$(STAMP): pyproject.toml scripts/setup.sh
	PY=$(PY) sh scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

## run piestream's main job on embedded defaults
run: $(STAMP)
	$(BIN)/piestream serve --demo

## lint + type-check + the whole test suite
test: $(STAMP) lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not spark" $(PYTEST_ARGS)

## benchmarks need the anchors (rocksdict) of the `bench` extra
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b $(BENCH_ARGS) || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
