# specbook: two commands.
#   make lab    set up (first time) and open the lessons in JupyterLab
#   make test   set up (first time) and run the whole test suite
# Set-up creates .venv with Python 3.11+, installs torch, then the project with all extras.

PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specbook-installed

.PHONY: lab test tour install model browser figures

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e '.[all]'
	@touch $(STAMP)

install: $(STAMP)

model: install
	$(BIN)/python -m specbook fetch-model

browser:
	bash scripts/ensure_chromium.sh

lab: install
	$(BIN)/jupyter lab notebooks/

tour: install
	$(BIN)/python -m specbook tour

test: install model browser
	$(BIN)/python -m pytest

figures: install
	$(BIN)/python scripts/make_figures.py
