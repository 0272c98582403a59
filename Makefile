# Gantry: `make run` to try it, `make test` to check it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The second test pass runs on PostgreSQL + Redis (the production stack).
PG_URL ?= postgres://postgres@127.0.0.1:5432/gantry
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15
# Both passes run in parallel (pytest-xdist), one worker per core. Each worker has its own
# test database (pytest-django) and Redis database (config/settings/base.py); tests sharing a
# costly fixture (Ceph, a module's servers) are grouped onto one worker (tests/conftest.py).
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --dist loadgroup

.PHONY: run examples serving-torch test-k8s-ddp docs test test-fast test-sqlite test-postgres lint bench image-pytorch image-tensorflow image-mxnet install clean

RUN_STAMP := $(VENV)/.installed-run

# `make run` installs what serving needs (the platform, the executor, JupyterLab for
# notebooks) with pip's progress on screen; the test tools and the examples' PyTorch come
# with `make test` or `make examples`.
$(RUN_STAMP): pyproject.toml requirements.lock executor/pyproject.toml cli/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	@echo "Installing Gantry and JupyterLab into $(VENV) (a few minutes the first time)..."
	$(BIN)/python -m pip install --progress-bar on -c requirements.lock -e '.[notebooks]' ./executor -e ./cli
	touch $(RUN_STAMP)

# Model endpoints' serving runtime (endpoints/runtime/): MLServer in a virtualenv of its own,
# like a serving image (its pins cannot share Gantry's: requirements.txt says why). Order-only
# below: built when missing or when its requirements change, without reinstalling .venv.
SERVING := .venv-serving
SERVING_STAMP := $(SERVING)/.installed
$(SERVING_STAMP): endpoints/runtime/requirements.txt endpoints/runtime/requirements.lock
	test -x $(SERVING)/bin/python || $(PYTHON) -m venv $(SERVING)
	$(SERVING)/bin/python -m pip install --upgrade pip
	@echo "Installing the model serving runtime (MLServer with its scikit-learn and MLflow runtimes) into $(SERVING)..."
	$(SERVING)/bin/python -m pip install --progress-bar on -c endpoints/runtime/requirements.lock -r endpoints/runtime/requirements.txt
	touch $(SERVING_STAMP)

# PyTorch in the serving runtime, for TorchScript endpoints: `make install` and `make
# examples` add it, `make run` does not (scikit-learn endpoints never load torch; a
# TorchScript endpoint without it is refused with the words `make serving-torch`).
SERVING_TORCH_STAMP := $(SERVING)/.installed-torch
$(SERVING_TORCH_STAMP): endpoints/runtime/requirements-torch.txt endpoints/runtime/requirements.lock | $(SERVING_STAMP)
	@echo "Installing PyTorch into $(SERVING) for TorchScript endpoints (PyPI's CUDA build: 4.6 GiB installed; 43 s on a fast link)..."
	$(SERVING)/bin/python -m pip install --progress-bar on -c endpoints/runtime/requirements.lock -r endpoints/runtime/requirements-torch.txt
	touch $(SERVING_TORCH_STAMP)

serving-torch: $(SERVING_TORCH_STAMP)

$(STAMP): $(RUN_STAMP) | $(SERVING_STAMP) $(SERVING_TORCH_STAMP)
	@echo "Installing the test tools and the examples' libraries (PyTorch's CUDA build: about 2.7 GB to download, 4.8 GB installed)..."
	$(BIN)/python -m pip install --progress-bar on -c requirements.lock -e '.[dev,examples,docs]' ./executor -e ./cli
	touch $(STAMP)

install: $(STAMP)

# The examples (examples/README.md) need PyTorch and scikit-learn in the job's Python.
examples: $(RUN_STAMP) | $(SERVING_TORCH_STAMP)
	@echo "Installing PyTorch from PyPI: its CUDA build, even without a GPU (about 2.7 GB to download, 4.8 GB installed; examples/README.md has the CPU wheel)..."
	$(BIN)/python -m pip install --progress-bar on -c requirements.lock -e '.[examples]'

# The manual (docs/), served offline from this checkout: http://127.0.0.1:8100/ (DOCS_PORT).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir site
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$${DOCS_PORT:-8100}

run: $(RUN_STAMP) | $(SERVING_STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	@echo "Open http://$${GANTRY_HOST:-127.0.0.1}:$${GANTRY_PORT:-8000}/ and sign in as admin (password: $${GANTRY_DEMO_PASSWORD:-gantry-demo})."
	$(BIN)/python manage.py serve

test: lint test-sqlite test-postgres

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python manage.py makemigrations --check --dry-run

test-sqlite: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The quick loop: no outside service (Ceph, Keycloak, the Kubernetes control plane, the OCI
# registry, Chromium) and no test that starts real jobs or servers (`slow`), on SQLite.
# `make test` stays the gate; this says what it left out and how many tests that was.
FAST_SKIP := ceph or keycloak or k8s_live or registry or browser or slow
test-fast: $(STAMP)
	@echo "test-fast leaves out tests marked: $(FAST_SKIP) (make test runs them)"
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python -m pytest $(XDIST) -m 'not ($(FAST_SKIP))' $(PYTEST_ARGS)

# Tests marked `postgres` restart the PostgreSQL server itself: they run after the parallel
# pass, alone, since a restart ends every other xdist worker's connections mid-test.
# PostgreSQL and Redis are installed and started from Debian's packages where this runs as
# root (platform/dev/services-up); elsewhere the pass is skipped with a notice where they
# are not running, except under CI=true.
test-postgres: $(STAMP)
	@if ! $(BIN)/python tests/services_up.py 2>/dev/null && [ "$$(id -u)" = 0 ]; then \
		platform/dev/services-up || true; fi
	@if $(BIN)/python tests/services_up.py; then \
		export DATABASE_URL=$(PG_URL) REDIS_URL=$(REDIS_TEST_URL); \
		$(BIN)/python -m pytest $(XDIST) -m 'not postgres' $(PYTEST_ARGS) && \
		{ $(BIN)/python -m pytest -m postgres $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]; }; \
	elif [ "$$CI" = "true" ]; then echo "PostgreSQL/Redis not reachable and CI=true"; exit 1; \
	else echo "PostgreSQL/Redis not reachable: skipped the PostgreSQL + Redis pass"; fi

# Every benchmark in bench/ (the locustfile is the load generator's and measure.py their shared helpers: not benchmarks).
# The full PyTorch image built with no image hub (buildah, FROM the Python image that
# platform/dev/images-build makes from Debian's packages): about 3 minutes and 6 GB here,
# not part of CI; writes bench/results/image_pytorch.json.
image-pytorch image-tensorflow image-mxnet: $(STAMP)
	$(BIN)/python bench/image_catalog.py $(@:image-%=%)

# DDP over gloo across two pods on the real test node, in the PyTorch image above (built
# first where missing): tests/jobs/test_k8s_real_node.py's test marked big_image, which
# `make test` deselects (the image is 6 GB to build, push and pull). Not part of CI;
# writes bench/results/k8s_ddp.json.
test-k8s-ddp: $(STAMP)
	$(BIN)/python bench/image_catalog.py pytorch --if-missing
	$(BIN)/python -m pytest tests/jobs/test_k8s_real_node.py --big-images -m big_image -p no:randomly -s

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[bench]'
	for script in bench/*.py; do \
		case $$script in *locustfile.py|*measure.py|*image_catalog.py) continue;; esac; \
		$(BIN)/python $$script || exit 1; \
	done

clean:
	rm -rf $(VENV) $(SERVING) staticfiles
