# gpufleet: `make demo` (2-node training on the local sandbox) and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo needs only sshd (its nodes); ssh-keygen comes with it. It copies the workdir
# without rsync when rsync is missing. The tests need the rest: the real tools they check against.
DEMO_DEBS := openssh-server
TEST_DEBS := $(DEMO_DEBS) openssh-client shellcheck cloud-init pdsh openmpi-bin iptables qemu-system-x86 qemu-utils debootstrap genisoimage e2fsprogs rsync jq
# setuptools prints an information-only note on every editable install; the rest stays visible.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q

.PHONY: demo test test-quick test-vm test-vm-recover lint fmt venv debs-demo debs-test deps-test deps-demo docs golden bench faults clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python

# Debian packages the sandbox and the checks use; installed only when missing and root.
debs-demo: DEBS = $(DEMO_DEBS)
debs-test: DEBS = $(TEST_DEBS)
debs-demo debs-test:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing (run as root or: sudo apt-get install$$missing)"; fi; \
	fi

deps-demo: venv debs-demo
	$(PIP_INSTALL) -e '.[examples]'

# The policy pack's requirements (the Policy SDK only) go into a folder of their own, as the pack
# runs in a virtualenv of its own (pulumi-policy pins protobuf and grpcio below the cloud SDKs').
POLICY_SDK := build/policy-sdk
deps-test: venv debs-test
	$(PIP_INSTALL) -e '.[dev,examples]'
	@test -d $(POLICY_SDK)/pulumi_policy || $(PIP_INSTALL) --target $(POLICY_SDK) -r policy/requirements.txt

demo: deps-demo
	$(BIN)/python examples/demo.py

lint: deps-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The docs site (mkdocs.yml, docs/): --strict turns a broken link, a missing anchor or a page
# left out of nav into a failure (not with -q: mkdocs then stops counting warnings). Built into
# site/ (ignored by git).
docs: deps-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# Everything, the QEMU VM tests included (a one-time image build as root, then ~20 minutes of
# TCG boots); `make test-quick` leaves the VMs out, `make test-vm` runs only them.
test: deps-test docs
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	GPUFLEET_VM_TESTS=1 $(BIN)/python -m pytest -q

test-quick: deps-test docs
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

test-vm: deps-test
	GPUFLEET_VM_TESTS=1 $(BIN)/python -m pytest -q -rA -s tests/integration/test_vm.py

test-vm-recover: deps-test
	GPUFLEET_VM_TESTS=1 GPUFLEET_VM_RECOVER_TESTS=1 $(BIN)/python -m pytest -q -rA -s tests/integration/test_vm_recover.py

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Regenerate golden files after an intended change to rendered text; review the diff.
golden: deps-test
	GPUFLEET_UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q $$(grep -rl --include='*.py' 'golden(' tests)

# A longer fault campaign than CI's (signals and faults at random moments of a run).
FAULTS ?= 60
faults: deps-test
	GPUFLEET_FAULTS=$(FAULTS) $(BIN)/python -m pytest -q -s tests/faults

bench: deps-test
	$(BIN)/python benchmarks/fanout.py
	$(BIN)/python benchmarks/sync.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .ruff_cache
