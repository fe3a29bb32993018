# Two entry points: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# llama.cpp for any x86-64 with AVX2, not -march=native: a native build on a CPU that lists AMX
# compiles AMX tile kernels, and where the (virtual) machine has not enabled AMX state they stop the
# process with an illegal instruction on the first decode. Override for a native build, e.g.
# make install LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON" (after `pip cache remove llama_cpp_python`).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: install demo test clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch on this machine; a looser spec would pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	# llama-cpp-python compiles llama.cpp (~6 min on 2 cores, once: pip caches the wheel).
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -q -e '.[all,dev,llamacpp]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/specdecode demo

test: install
	$(PY) -m pytest -q -ra

clean:
	rm -rf $(VENV)
