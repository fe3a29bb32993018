# Two entry points: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# llama.cpp picks its CPU kernels when it is compiled, so it is built for the CPU that builds it:
# AVX2, plus AVX-512 (VNNI, BF16, VBMI) where /proc/cpuinfo lists them (what that buys is measured
# in docs/backends.md, "llama.cpp build").
# AMX (int8 tiles: llama.cpp runs a pass of 9-32 tokens of a Q4_0/Q4_K/Q8_0 model through them) only
# where make/amx_probe.c, compiled and run here, gets a tile product right: a virtual machine can list
# AMX in /proc/cpuinfo without enabling its state, and GCC 12 miscompiles llama.cpp's tile setup
# unless dead-store elimination is off (the probe says which; either way a bad build would die with
# an illegal instruction on its first decode). An AMX build runs on a thread of its own beside torch
# (src/specdecode/models/backends/ggml_thread.py says why), so it uses llama.cpp's own thread pool:
# two OpenMP teams on few cores make libgomp's barriers sleep, and a pass then costs half again as
# much. Never -march=native, which would turn AMX on without the probe. The wheel is kept under a
# name made of these flags, so a cache shared with a machine of another CPU never hands it a build it
# cannot run (pip's own wheel cache would: it keys a built sdist by its URL alone).
# Override, e.g.: make install LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON"
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has = $(filter $(1),$(CPU_FLAGS))
amx_probe = $(shell probe=$$(mktemp) && $(CC) -O2 $(1) -mamx-tile -mamx-int8 make/amx_probe.c -o $$probe 2>/dev/null \
	&& sh -c $$probe 2>/dev/null && echo yes; rm -f $$probe)
AMX_LISTED := $(and $(call has,amx_tile),$(call has,amx_int8))
AMX_RUNS := $(if $(AMX_LISTED),$(call amx_probe))
AMX_RUNS_NO_DSE := $(if $(AMX_LISTED),$(if $(AMX_RUNS),,$(call amx_probe,-fno-dse)))
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	$(if $(and $(call has,avx512f),$(call has,avx512bw),$(call has,avx512vl),$(call has,avx512dq),$(call has,avx512cd)),\
	-DGGML_AVX512=ON $(if $(call has,avx512vbmi),-DGGML_AVX512_VBMI=ON) \
	$(if $(call has,avx512_vnni),-DGGML_AVX512_VNNI=ON) $(if $(call has,avx512_bf16),-DGGML_AVX512_BF16=ON)) \
	$(if $(AMX_RUNS)$(AMX_RUNS_NO_DSE),-DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON $(if $(call has,amx_bf16),-DGGML_AMX_BF16=ON) \
	-DGGML_OPENMP=OFF) \
	$(if $(AMX_RUNS_NO_DSE),-DCMAKE_C_FLAGS=-fno-dse -DCMAKE_CXX_FLAGS=-fno-dse)
LLAMA_VERSION := $(shell sed -n 's/.*"llama-cpp-python\(\[[a-z,]*\]\)\{0,1\}==\([0-9.]*\)".*/\2/p' pyproject.toml)
# Kernels of ours for passes of a few tokens (a speculative verify); a token's logits do not depend on the
# pass width (Q4_0 bit for bit as stock llama.cpp's, Q6_K within float rounding of it):
# - make/llama-cpp-repack-rows.patch: without AMX, llama.cpp runs Q4_0 passes of 2-3 tokens row by row
#   and of 4 or more with a per-row sign trick, so a few tokens cost several one-token passes; the patch
#   repacks Q4_0 and Q6_K (the output layer) sixteen columns a block and multiplies each unpacked block
#   into up to eight rows with AVX512-VNNI where the build has AVX512 BW and VNNI, with AVX2 elsewhere
#   (docs/backends.md, "Passes of a few tokens on AVX-512" and "... on AVX2").
# - make/llama-cpp-amx-rows.patch, AMX builds only: llama.cpp sends every pass of two tokens or more
#   through its tile kernel, which at a few rows costs nearly twice a one-token pass; the patch runs
#   passes of 2-8 tokens against Q4_0, Q8_0 and Q6_K weights with VNNI, reading the weights once
#   (docs/backends.md, "Passes of a few tokens on AMX").
LLAMA_PATCH := make/llama-cpp-repack-rows.patch $(if $(AMX_RUNS)$(AMX_RUNS_NO_DSE),make/llama-cpp-amx-rows.patch)
llama_key = $(shell echo '$(strip $(1))' | md5sum | cut -c1-12)
LLAMA_CACHE := $(or $(SPECDECODE_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/specdecode)/wheels
# The wheel leaves out llama-cpp-python's multimodal library (mtmd: a fifth of the compile), which
# only its image chat handlers load; the engine and llama_cpp.server run without it.
LLAMA_WHEEL_ARGS := -DLLAVA_BUILD=OFF
LLAMA_WHEELS := $(LLAMA_CACHE)/llama-cpp-python-$(LLAMA_VERSION)-$(call llama_key,$(LLAMA_CMAKE_ARGS) $(LLAMA_WHEEL_ARGS) \
	$(shell cat $(LLAMA_PATCH) | md5sum | cut -c1-12))
# Both builds start from llama-cpp-python's source release (it vendors the llama.cpp it binds), fetched
# and unpacked into the recipe's $$tmp.
LLAMA_SDIST = $(PY) -m pip download -q --no-deps --no-binary :all: -d $$tmp llama-cpp-python==$(LLAMA_VERSION) $(QUIET) && \
	tar -xzf $$tmp/llama_cpp_python-$(LLAMA_VERSION).tar.gz -C $$tmp

# llama.cpp's own server (`llama-server`), a third-party peer for `verify`, `bench` and `tune` with
# --endpoint: built from the llama.cpp inside the same llama-cpp-python sdist, with the same CPU flags
# and without our patch (it stands for the llama.cpp users run), statically linked, cached beside the
# wheel, and copied into the venv's bin/.
LLAMA_SERVER_CACHE := $(LLAMA_CACHE)/llama-cpp-python-$(LLAMA_VERSION)-$(call llama_key,$(LLAMA_CMAKE_ARGS))/llama-server
LLAMA_SERVER := $(VENV)/bin/llama-server

.PHONY: install demo test clean llama-server

# pip's notices about this machine's package sources (index folders that do not exist here) are
# filtered out of the install output; pip's own exit status still decides (pipefail).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
QUIET := 2>&1 | { grep -v -e 'is ignored: it is neither a file nor a directory' || true; }

$(STAMP): pyproject.toml Makefile $(LLAMA_PATCH)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip $(QUIET)
	# The CPU wheel of torch on this machine; a looser spec would pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0 $(QUIET)
	# llama-cpp-python compiles llama.cpp (~7 min on 2 cores, once per set of CPU flags).
	@ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || \
		echo "building llama.cpp for this CPU: about 7 minutes on 2 cores, once (cached in $(LLAMA_WHEELS))"
	ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || { tmp=$$(mktemp -d) && $(LLAMA_SDIST) && \
		$(foreach patch,$(LLAMA_PATCH),patch -s -p1 -d $$tmp/llama_cpp_python-$(LLAMA_VERSION) < $(patch) &&) \
		CMAKE_ARGS="$(strip $(LLAMA_CMAKE_ARGS) $(LLAMA_WHEEL_ARGS))" $(PY) -m pip wheel -q --no-deps --no-cache-dir \
			-w $(LLAMA_WHEELS) $$tmp/llama_cpp_python-$(LLAMA_VERSION) $(QUIET); status=$$?; rm -rf $$tmp; exit $$status; }
	# Reinstalled even at the same version: a change of CPU flags makes another wheel of that version.
	$(PY) -m pip install -q --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl $(QUIET)
	$(PY) -m pip install -q -e '.[all,dev,llamacpp,onnx]' $(QUIET)
	touch $(STAMP)

install: $(STAMP)

llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER): | $(STAMP)
	@test -x $(LLAMA_SERVER_CACHE) || echo "building llama.cpp's llama-server for this CPU: about 7 minutes on 2 cores, once (cached in $(dir $(LLAMA_SERVER_CACHE)))"
	test -x $(LLAMA_SERVER_CACHE) || { tmp=$$(mktemp -d) && $(LLAMA_SDIST) && \
		{ cmake -S $$tmp/llama_cpp_python-$(LLAMA_VERSION)/vendor/llama.cpp -B $$tmp/build -DCMAKE_BUILD_TYPE=Release \
			$(strip $(LLAMA_CMAKE_ARGS)) -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
			-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON && \
		cmake --build $$tmp/build --target llama-server -j $$(nproc); } >$$tmp/build.log 2>&1 || \
			{ tail -40 $$tmp/build.log; false; } && \
		mkdir -p $(dir $(LLAMA_SERVER_CACHE)) && cp $$tmp/build/bin/llama-server $(LLAMA_SERVER_CACHE).tmp && \
		mv $(LLAMA_SERVER_CACHE).tmp $(LLAMA_SERVER_CACHE); status=$$?; rm -rf $$tmp; exit $$status; }
	cp $(LLAMA_SERVER_CACHE) $(LLAMA_SERVER)

demo: install
	$(VENV)/bin/specdecode demo

# One pytest-xdist worker a core (at most 4), each computing on one thread (tests/conftest.py); a test
# file stays on one worker, so its models load once.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
test: install llama-server
	$(PY) -m pytest -q -ra --durations=15 -n $(TEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV)
