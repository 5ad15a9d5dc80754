# The two commands of README.md:
#   make demo   set up a venv and run stridelens on the bundled examples
#   make test   set up a venv and run the test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stridelens-installed

.PHONY: demo test lint venv clean

venv: $(STAMP)

# torch is pinned to the CPU build that lies on local disk; any other spec would
# download several GB. The package itself only asks for a range.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy server inspector

clean:
	rm -rf $(VENV) build *.egg-info
