# Two entry points on a fresh Debian/Ubuntu machine:
#   make demo   set everything up and run decice on its built-in default target (sim)
#   make test   set everything up and run the whole test suite (what CI runs)
VENV ?= .venv
DECICE := $(VENV)/bin/decice
PYTEST_ARGS ?=

.PHONY: demo test setup setup-test lint clean

setup:
	./scripts/bootstrap.sh

setup-test:
	WITH_TEST=1 ./scripts/bootstrap.sh

demo: setup
	./scripts/demo.sh

test: setup-test
	./scripts/test.sh $(PYTEST_ARGS)

lint: setup-test
	$(VENV)/bin/ruff check cli kube scheduler tests bench molecule scripts ansible_collections/decice/hybrid/plugins ansible_collections/decice/hybrid/roles
	$(VENV)/bin/ruff format --check cli kube scheduler tests bench molecule scripts ansible_collections/decice/hybrid/plugins ansible_collections/decice/hybrid/roles
	$(VENV)/bin/mypy
	$(VENV)/bin/ansible-lint

clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache
