# The two commands of README.md:
#   make demo   set up a venv and run stridelens on the bundled examples
#   make test   set up a venv and run the test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stridelens-installed

.PHONY: demo test lint docs venv clean

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

# mypy checks the package as it is imported (`stridelens.server...`): the folders are mapped to
# import names by pyproject's package-dir, which mypy cannot read, so a tree of links under
# build/ gives it the same layout. Without it every `from stridelens...` import was unresolved
# (Any) and no call across modules was checked.
MYPY_TREE := build/mypy-path/stridelens

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	rm -rf $(MYPY_TREE) && mkdir -p $(MYPY_TREE)
	ln -s ../../../server/_root/__init__.py ../../../server/_root/__main__.py ../../../server/_root/i18n \
		../../../server ../../../inspector $(MYPY_TREE)/
	MYPYPATH=build/mypy-path $(VENV)/bin/mypy -p stridelens

# The documentation site from docs/ (mkdocs.yml): warnings are errors. The CLI reference and the
# rule pages are generated while it builds (docs/hooks.py). Output: site/ (git-ignored).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build site *.egg-info
