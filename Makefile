# Gantry: `make run` to try it, `make test` to check it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench install clean

$(STAMP): pyproject.toml requirements.lock executor/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]' ./executor
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	@echo "Open http://127.0.0.1:8000/ and sign in as admin (password: $${GANTRY_DEMO_PASSWORD:-gantry-demo})."
	$(BIN)/python manage.py serve

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python -m pytest

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) staticfiles
