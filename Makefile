# Two commands on a fresh Linux machine with Python 3.10+:
#   make run   - create .venv, install batchfit, open the desktop app on a worked example
#   make test  - create .venv, install the test and launchers extras (CPU torch), run ruff,
#                the import contracts, mypy and the whole suite (tests/launchers feeds
#                exports to the launchers' own parsers)
# Packaging (packaging/README.md):
#   make dist  - the frozen folder dist/batchfit/ and its .tar.gz (fails over 120 MB)
#   make smoke - launch the frozen binaries offscreen: plan, screenshot, calibration hint
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run run-host-libs example test lint bench clean translations dist smoke dist-host-libs \
	screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# An editable install leaves batchfit's bytecode to the first start (0.6 s of it on a
# 2-core VM); compile it now, as pip does for a wheel.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m compileall -q planner ui
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	DS_BUILD_OPS=0 $(BIN)/python -m pip install --quiet -e '.[test,launchers]'
	$(BIN)/python -m pip install --quiet --no-deps llamafactory==0.9.5 peft==0.18.1 \
		omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 \
		|| echo 'make: llamafactory not installed; its launcher test is skipped'
	$(BIN)/python -m compileall -q planner ui
	touch $@ $(VENV)/.installed-run

# What Qt's xcb platform plugin loads (ldd of PySide6's libqxcb.so, libQt6XcbQpa, Gui,
# Widgets and DBus; Debian/Ubuntu names). A fresh Debian lacks libxcb-cursor0 and the app
# stops with "xcb-cursor0 or libxcb-cursor0 is needed". Installed when root with apt (as
# `make test` does for slurm-client), else one line names them.
RUN_HOST_PACKAGES := libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 \
	libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0 \
	libx11-xcb1 libegl1 libgl1 libfontconfig1 libdbus-1-3 libglib2.0-0
run-host-libs:
	@command -v dpkg >/dev/null || exit 0; \
	missing=$$(for p in $(RUN_HOST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; \
		done); [ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "make: installing the Qt platform plugin's libraries:" $$missing; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null \
		|| { echo "make: apt-get could not install:" $$missing; exit 1; }; \
	else echo "make: the desktop app needs these packages: sudo apt-get install" \
		$$missing; exit 1; fi

run: run-host-libs $(VENV)/.installed-run
	$(BIN)/batchfit-gui

# The command line on the same worked example, for machines without a display.
example: $(VENV)/.installed-run
	$(BIN)/batchfit estimate --model llama-3.1-8b --seq-len 4096 --micro-batch 2 \
		--gpu h100-sxm --gpus-per-node 8 --zero 3 --recompute full

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

test: $(VENV)/.installed-test
	@command -v sbatch >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-client >/dev/null; } \
		|| echo 'make: sbatch not installed; the Slurm launcher check is skipped'
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

# Benchmarks get their own environment: llm-analysis (the peer compared side by side) pins
# an old transformers that must not leak into the test environment.
BENCH := .venv-bench
$(BENCH)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH)
	$(BENCH)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH)/bin/python -m pip install --quiet -e '.[test]' llm-analysis
	touch $@

bench: $(BENCH)/.installed
	$(BENCH)/bin/python -m benchmarks.run_all

# The README's pictures, rendered offscreen by the app itself (a CJK font, e.g. Debian's
# fonts-wqy-microhei, is needed for the Chinese one).
SHOT := QT_QPA_PLATFORM=offscreen $(BIN)/batchfit-gui --screenshot
screenshots: $(VENV)/.installed-run
	$(SHOT) docs/screenshot.png --language en
	$(SHOT) docs/screenshot-zh_CN.png --language zh_CN
	mkdir -p build
	$(BIN)/batchfit plan --model llama-3.1-70b --seq-len 8192 --gpu h200 --nodes 16 \
		--global-batch 2048 --tokens 15T --save build/cluster-plan.json > /dev/null
	$(SHOT) docs/screenshot-cluster.png --language en build/cluster-plan.json
	$(SHOT) docs/screenshot-1024.png --language en --size 1024x700
	$(SHOT) docs/screenshot-1024-zh_CN.png --language zh_CN --size 1024x700
	$(SHOT) docs/screenshot-empty.png --language en --size 1024x700 --model llama-3.1-70b
	$(SHOT) docs/screenshot-empty-zh_CN.png --language zh_CN --size 1024x700 \
		--model llama-3.1-70b

# The desktop app's translations (docs/translations.md): pull every translate() and
# QT_TRANSLATE_NOOP string of ui/ into the .ts files, then compile each to its .qm.
TS_FILES := $(wildcard ui/translations/*.ts)
translations: $(VENV)/.installed-run
	$(BIN)/pyside6-lupdate -extensions py -locations none -no-obsolete ui -ts $(TS_FILES)
	$(BIN)/pyside6-lrelease $(TS_FILES)

# The frozen build gets its own environment (.venv-dist: the runtime dependencies and
# PyInstaller, no torch, no test tools), so what it bundles is what a user runs.
DIST_VENV := .venv-dist
$(DIST_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DIST_VENV)/bin/python -m pip install --quiet -e '.[freeze]'
	touch $@

# Qt's xcb and wayland plugins need these; PyInstaller silently leaves out what the build
# host lacks (Friture's .github/workflows/install-linux.sh warns of it), so install them when root and missing (Debian/Ubuntu names).
DIST_HOST_PACKAGES := libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 \
	libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0 libegl1 \
	libfontconfig1 libdbus-1-3 libwayland-cursor0 libwayland-egl1
dist-host-libs:
	@missing=$$(for p in $(DIST_HOST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; \
		done 2>/dev/null); [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null && echo "make: installing $$missing" \
		&& DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } \
		|| echo "make: not installed: $$missing (the frozen app will need them on the user's machine)"

dist: $(DIST_VENV)/.installed dist-host-libs
	rm -rf dist/batchfit
	$(DIST_VENV)/bin/python packaging/build_dist.py

# The frozen binaries offscreen; with the test venv's torch, a CPU calibration through it.
smoke:
	@test -x dist/batchfit/batchfit-gui || { echo 'make: run make dist first'; exit 2; }
	$(DIST_VENV)/bin/python packaging/smoke_test.py dist/batchfit \
		$$( [ -x $(BIN)/python ] && $(BIN)/python -c 'import torch' 2>/dev/null \
		&& echo --python-with-torch $(BIN)/python)

clean:
	rm -rf $(VENV) $(BENCH) $(DIST_VENV) build dist .pytest_cache .ruff_cache .hypothesis \
		.mypy_cache .import_linter_cache .grimp_cache
