# specbook: two commands.
#   make lab    set up (first time) and open the lessons in JupyterLab
#   make test   set up (first time) and run the whole test suite
# Set-up creates .venv with Python 3.11+, installs torch, then the project. `make lab`
# installs only what the lessons need (extra `lab`); `make test` adds the test, grading
# and browser tools (extra `all`). Both take torch's version from constraints.txt, the
# pin environment.yml uses too.
#
# Also: make site (the lessons executed and rendered to build/site/), make tour,
# make figures. PYTHON=python3.12 or VENV=$HOME/venvs/specbook choose another interpreter or place.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --quiet
CONSTRAINTS := constraints.txt
LAB_STAMP := $(VENV)/.specbook-lab
ALL_STAMP := $(VENV)/.specbook-all

.PHONY: lab test site tour install install-lab model browser figures student

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "specbook needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) --version 2>&1). Try: make PYTHON=python3.11 ..."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# torch first and on its own, so that pip takes the pinned build (a CPU wheel where one
# is at hand) before anything that depends on torch can pull in another.
$(LAB_STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP) install -c $(CONSTRAINTS) torch
	$(PIP) install -c $(CONSTRAINTS) -e '.[lab]'
	@touch $@

$(ALL_STAMP): $(LAB_STAMP)
	$(PIP) install -c $(CONSTRAINTS) -e '.[all]'
	@touch $@

install-lab: $(LAB_STAMP)

install: $(ALL_STAMP)

model: $(LAB_STAMP)
	$(BIN)/python -m specbook fetch-model

browser:
	bash scripts/ensure_chromium.sh

# JupyterLab refuses to start as root (containers, many cloud notebook machines) unless told
# --allow-root: pass it, and say so, only when the user is root.
lab: install-lab model
	@if [ "$$(id -u)" = 0 ]; then echo "make lab: you are root, so JupyterLab is started with --allow-root"; fi
	$(BIN)/jupyter lab notebooks/ $$(if [ "$$(id -u)" = 0 ]; then echo --allow-root; fi)

tour: install-lab
	$(BIN)/python -m specbook tour

test: install model browser
	$(BIN)/python -m pytest

site: install-lab model
	$(BIN)/python scripts/build_site.py --out build/site

figures: install-lab
	$(BIN)/python scripts/make_figures.py

# The student edition: the lessons with every answer stubbed and its solution text removed, and
# nbgrader's student release of every assignment (nbgrader comes with the full install).
student: install
	$(BIN)/python -m specbook student-edition --out build/student
