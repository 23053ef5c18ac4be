# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The app and tests find data through MEDEVAL_DATA_DIR; beside a checkout of the project, ../shared/data is the default.
export MEDEVAL_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),$(CURDIR)/var/data)
PORT ?= 8501

.PHONY: install run test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python requirements.txt requirements-dev.txt
	$(BIN)/pip install --disable-pip-version-check -q -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) --server.headless true \
		--browser.gatherUsageStats false

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache tests/artifacts
