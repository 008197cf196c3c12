# Everything a fresh machine needs: python3 with venv.  `make demo` and `make test` set up .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
DATA   := slurm_gpufleet/data/captures

.PHONY: setup bytecode system-deps demo docs test test-fast test-slurm lint bench clean

# The editable install as a plain path (.pth), not setuptools' import hook: the hook's module imports
# pathlib, re and urllib.parse in every Python process the venv starts, 25-35 ms of each health check,
# prolog and CLI call the tests run (site: 43 ms with it, 8 ms without).  setuptools calls the mode
# transitional (and prints a notice saying so, kept in the log); where it is gone, the second line installs
# the default way.  pip's output goes to $(VENV)/install.log, shown whole when the install fails.
PIP_LOGGED = > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
$(VENV)/.installed: pyproject.toml
	@echo "setting up $(VENV) (the package and its test and docs tools)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip $(PIP_LOGGED)
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,docs]' --config-settings editable_mode=compat \
	  > $(VENV)/install.log 2>&1 || $(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,docs]' $(PIP_LOGGED)
	@touch $@

setup: $(VENV)/.installed

# Debian packages the tests use: Slurm (tests/slurm/minicluster.sh installs it too) and Chromium for the
# HTML report's rendering test.  Needs root; without it, those tests say what is missing.
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; \
	  for p in slurmctld slurmd slurm-client slurmdbd mariadb-server chromium debootstrap shellcheck; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then echo "installing$$missing"; \
	    (DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null) || \
	    echo "system-deps: could not install$$missing; the tests that need them will say so"; fi; \
	fi

# a command whose exit status is a verdict: said as what it means (`make` would print "Error 1 (ignored)")
SAID = ; rc=$$?; case $$rc in 0) echo "(exit 0: ok or warn)";; 1) echo "(exit 1: reboot or drain, or not compatible)";; *) echo "(exit $$rc)";; esac

demo: setup system-deps
	@echo "== healthy real H200 (nvidia-smi -q -x), default policy"
	@$(VENV)/bin/slurm-gpufleet check --nvidia-smi-q $(DATA)/h200-real/nvidia-smi-q.xml $(SAID)
	@echo; echo "== real A10 with a pending row remap"
	@$(VENV)/bin/slurm-gpufleet check --nvidia-smi-q $(DATA)/public/nvidia-smi/remap_pending_a10_1.txt $(SAID)
	@echo; echo "== real H100 x8 with HW power brake on one GPU, as JSON (first finding)"
	@$(VENV)/bin/slurm-gpufleet check --nvidia-smi-q $(DATA)/public/nvidia-smi/hw_power_brake_one_gpu_h100x8_1.txt --json | $(PY) -c 'import json,sys; d=json.load(sys.stdin); print(d["verdict"], json.dumps([f for f in d["findings"] if f["severity"]!="ok"][0]))'
	@echo; echo "== the H200 against the sample site policy (node gpu001 of group h200)"
	@$(VENV)/bin/slurm-gpufleet check --nvidia-smi-q $(DATA)/h200-real/nvidia-smi-q.xml --config etc/gpufleet.toml --node gpu001 $(SAID)
	@echo; echo "== Xid events in real kernel log lines"
	cut -f1 $(DATA)/public/kernel_log_lines.tsv | tail -n +2 | $(VENV)/bin/slurm-gpufleet xid -
	@echo; echo "== can R590 run Volta?"
	@$(VENV)/bin/slurm-gpufleet compat --driver 590.48.01 --arch Volta $(SAID)
	@echo; echo "== every real capture vendored in $(DATA), one verdict each"
	@for f in $(DATA)/public/nvidia-smi/*.txt $(DATA)/public/nvidia-smi/*.xml; do \
	  printf '%-42s ' $$(basename $$f); $(VENV)/bin/slurm-gpufleet check --nvidia-smi-q $$f --json | $(PY) -c 'import json,sys; d=json.load(sys.stdin); print(d["verdict"], "|", "; ".join(f["message"] for f in d["findings"] if f["severity"]!="ok")[:90])'; done

	@echo; echo "== what-if driver rollout on the bundled Helios job history (150 nodes x 8 GPUs, 10% budget)"
	@mkdir -p out
	$(VENV)/bin/slurm-gpufleet maintain simulate --nodes 150 --rollout-at 240 --max-unavailable 10% --config etc/gpufleet.toml --plot out/simulate.html
	@echo "plot: out/simulate.html"

	@echo; echo "== a real Slurm mini-cluster: a GPU fault drains a node, the fix resumes it"
	PYTHON=$(CURDIR)/$(PY) bash scripts/cluster_demo.sh

lint: setup
	$(VENV)/bin/ruff check slurm_gpufleet tests bench scripts healthcheck/slurm-gpufleet-healthcheck prolog_epilog

# Tiers, each timed:
#   test-fast: lint and every unit and engine test (the in-memory fleet, a small trace excerpt), no daemons;
#   slow:      the fuzz at 3,000 new cases a property and the measures on the whole Helios trace;
#   slurm:     the real-Slurm tests, two clusters at a time (2 cores: an idle 8-node cluster's health checks
#              alone take 0.4 of a core; three clusters and a DKMS build at once drove the load average to
#              70 and starved the lowest-priority tier for 15 minutes):
#              - on the host's Slurm (Debian 12: 22.05), every real-Slurm test but HOST_LATER's;
#              - beside it, one after the other: the cases that differ by release (the backends, what the
#                hooks write, reboots, reservations, blocks, the jobs' environment: marker `release`) on
#                each of the other releases below, each in a Debian root built once by
#                debootstrap (tests/slurm/minicluster.sh), then HOST_LATER's tests on the host's Slurm,
#                then the real package path in the Debian node
#                image (tests/slurm/test_real_image_node.py: a 2-node cluster of its own, one node on that
#                image, a rollout through the real packages, then the rest of bench/real_upgrade.py).
#                The image's DKMS builds are cached by their inputs (node_image.sh: ccache for each
#                compilation, and DKMS's module build whole), so a build made before takes seconds, not
#                the compiler's minutes; the tier runs at nice 10.
#              Every cluster has ports of its own, all below the kernel's ephemeral range (32768 up): an
#              outgoing connection may take one of those while a slurmd restarts.
# `SLURM_RELEASE=24.11 make test` runs the whole real-Slurm tier on that release only.
# PYSLURM_SRC=DIR (a PySlurm checkout of one release's branch): the pyslurm backend's contract runs on
# that release, built from it first (tests/slurm/pyslurm_build.sh, once); the summary says, per release,
# whether the contract ran or why it was skipped.
OTHER_RELEASES ?= 24.11 26.05
# on the other releases: only the cases whose outcome depends on the release (marker `release`, each with
# what differs); the host's release runs them all
RELEASE_TESTS  ?= -m "release and not image" tests/slurm
# the host's tests that run in the other stream, after the other releases (a cluster of their own), so that
# the two streams take about as long: test_deadline_jobs.py (about 5 min) and test_accounting.py (a cluster
# with slurmdbd and MariaDB of its own) there even them
HOST_LATER     ?= tests/slurm/test_deadline_jobs.py tests/slurm/test_accounting.py
PYTEST := $(PY) -m pytest -q -p no:cacheprovider
# each tier's wall time and the highest and mean 1-minute load average seen while it ran (sampled every 5 s)
TIMED  = t=$$(date +%s); peak=$$(mktemp); (while :; do cut -d' ' -f1 /proc/loadavg >> $$peak; sleep 5; done) & \
	sampler=$$!; $(1); rc=$$?; kill $$sampler 2>/dev/null; \
	echo "== tier $(2): $$(( $$(date +%s) - t )) s, peak load $$(sort -g $$peak | tail -1), mean load $$(awk '{s+=$$1} END {printf "%.1f", NR ? s/NR : 0}' $$peak), rc $$rc"; \
	rm -f $$peak; exit $$rc

# Bytecode is a build product here: where PYTHONDONTWRITEBYTECODE is set (this machine's environment, and
# so CI's, sets it) no Python process wrote it, so each of the few hundred CLI and hook processes the tests
# start compiled every module it imports from source (the CLI alone is 2,000 lines), and pytest rewrote
# every test module's asserts in each worker on every run.  make's own processes write it (the fast tier:
# 69-71 s with it forbidden, 63-65 s allowed, 2 cores); the package's is compiled up front, so that a fresh
# clone's first tier does not compile it in every process at once (0.1 s when up to date).
unexport PYTHONDONTWRITEBYTECODE
bytecode: setup
	@$(PY) -m compileall -q slurm_gpufleet > /dev/null

# the documentation site (out/site) with MkDocs, any warning an error: a page left out of the navigation,
# a link or anchor leading nowhere; first, the reference pages (docs/reference/) must be what the code and
# data files give (`python scripts/gen_docs.py` writes them)
docs: setup
	@$(PY) scripts/gen_docs.py --check && $(VENV)/bin/mkdocs build --strict --quiet && echo "docs: out/site/index.html"

test-fast: setup bytecode
	@$(call TIMED,$(VENV)/bin/ruff check slurm_gpufleet tests bench scripts healthcheck/slurm-gpufleet-healthcheck prolog_epilog && $(PYTEST) -n 2 -m "not slow and not image" --ignore=tests/slurm tests,fast)

test: setup system-deps docs test-fast
	@$(call TIMED,$(PYTEST) -n 2 -m slow --ignore=tests/slurm tests,slow)
	@$(call TIMED,$(MAKE) --no-print-directory test-slurm,slurm)

test-slurm: setup bytecode
	@mkdir -p out; if [ -n "$(SLURM_RELEASE)" ]; then exec $(PYTEST) -m "not image" tests/slurm; fi; \
	($(PYTEST) -rfEs --durations=8 -m "not image" $(addprefix --ignore=,$(HOST_LATER)) tests/slurm \
	   > out/test-slurm-host.log 2>&1; echo $$? > out/test-slurm-host.rc) & \
	(off=-10000; for r in $(OTHER_RELEASES); do \
	  SLURM_RELEASE=$$r GPUFLEET_TEST_PORT_OFFSET=$$off $(PYTEST) -rfEs --durations=8 $(RELEASE_TESTS) \
	    > out/test-slurm-$$r.log 2>&1; echo $$? > out/test-slurm-$$r.rc; \
	  off=$$((off - 4000)); done; \
	 $(if $(HOST_LATER),GPUFLEET_TEST_STREAM=host-later GPUFLEET_TEST_PORT_OFFSET=-22000 $(PYTEST) -rfEs --durations=8 \
	  -m "not image" $(HOST_LATER) > out/test-slurm-host-later.log 2>&1; echo $$? > out/test-slurm-host-later.rc;) \
	 nice -n 10 env GPUFLEET_TEST_PORT_OFFSET=-18000 $(PYTEST) -rfEs --durations=8 -m image \
	  tests/slurm/test_real_image_node.py > out/test-slurm-image.log 2>&1; \
	  echo $$? > out/test-slurm-image.rc) & \
	wait; rc=0; \
	for r in host $(if $(HOST_LATER),host-later) $(OTHER_RELEASES) image; do echo "Slurm $$r: $$(tail -1 out/test-slurm-$$r.log)"; \
	  grep -E '^[0-9.]+s (call|setup|teardown) ' out/test-slurm-$$r.log | sed 's/^/    slowest: /'; \
	  [ "$$(cat out/test-slurm-$$r.rc)" = 0 ] || { rc=1; tail -60 out/test-slurm-$$r.log; }; done; \
	for r in host $(OTHER_RELEASES); do \
	  why=$$(sed -n 's/.*pyslurm backend not usable here: //p' out/test-slurm-$$r.log | head -1); \
	  if [ -n "$$why" ]; then echo "pyslurm contract on $$r: skipped, $$why"; \
	  else echo "pyslurm contract on $$r: ran"; fi; done; exit $$rc

bench: setup
	$(PY) bench/check_speed.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .hypothesis
