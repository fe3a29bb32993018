# Two entry points: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch on this machine; a looser spec would pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	# llama-cpp-python compiles llama.cpp (~6 min on 2 cores, once: pip caches the wheel).
	$(PY) -m pip install -q -e '.[all,dev,llamacpp]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/specdecode demo

test: install
	$(PY) -m pytest -q -ra

clean:
	rm -rf $(VENV)
