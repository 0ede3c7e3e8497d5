# Two commands for a fresh machine:  make run  (the dashboard on the embedded model)  and  make test.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTHON ?= python3
# llama-cpp-python builds from source (≈6 min on 2 cores); pip caches the wheel after the first build.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install run bench test lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -e '.[llama,mlx,http,test]'
	touch $@

run: install
	$(VENV)/bin/inference-top $(ARGS)

bench: install
	$(VENV)/bin/inference-top bench --k 1,2 --requests 8 --max-tokens 64 --out out/bench $(ARGS)

lint: install
	$(VENV)/bin/lint-imports

test: install lint
	$(VENV)/bin/python -m pytest $(ARGS)

clean:
	rm -rf $(VENV) out .pytest_cache
