# zonesync — the commands a user and CI run. `make help` lists them.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
ZS    := $(VENV)/bin/zonesync
export JAVA_HOME ?= $(shell dirname $$(dirname $$(readlink -f $$(command -v java 2>/dev/null) 2>/dev/null)) 2>/dev/null)
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup demo test test-fast lint format bench dev-up dev-down dev-status lock clean

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

setup:  ## install what is missing: Debian packages, .venv, pinned Python packages
	@bash scripts/setup.sh

demo: setup  ## start zones, broker, Airflow; load the sample; run the main job; print where to look
	@$(ZS) demo

test: setup  ## the whole test suite (fails when no test ran)
	@bash scripts/run-tests.sh

test-fast: setup  ## unit tests only
	@$(PY) -m pytest -q -m unit

lint: setup  ## ruff check and format check
	@$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: setup  ## ruff format and autofix
	@$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

bench: setup  ## benchmarks: a table of ratios against baselines measured in the same run
	@$(PY) -m bench

dev-up: setup  ## start (or heal) the local environment
	@$(ZS) dev up

dev-down:  ## stop everything the local environment started
	@$(ZS) dev down

dev-status:  ## each component's address, pid and health
	@$(ZS) dev status

lock:  ## re-resolve requirements.txt into requirements.lock
	@rm -rf .lock-venv && python3 -m venv .lock-venv && .lock-venv/bin/pip install -q -r requirements.txt \
	  && (head -2 requirements.lock; .lock-venv/bin/pip freeze) > requirements.lock.new \
	  && mv requirements.lock.new requirements.lock && rm -rf .lock-venv

clean:  ## stop the environment and delete its state (all local zone data)
	@-$(ZS) dev down --wipe
