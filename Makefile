# Two commands do all set-up on a fresh machine:
#   make demo   -> the main job: baseline vs two_site vs eight_cell on the embedded Shakespeare corpus (compare notebook;
#                  PRESET=demo-long for twice the steps, about twice the time; refuses an OUT holding finished runs
#                  unless FORCE=1)
#   make test   -> lint (ruff), type check (mypy on islands_kit/), then the whole test suite
# Everything lands in .venv, made by scripts/setup.sh: the CPU torch build on purpose where no GPU is (an unpinned torch
# resolves to a multi-GB CUDA build), the Triton kernels only where nvidia-smi finds a GPU.
#   make lab    -> the notebooks in JupyterLab (installs the `lab` extra on first use)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
TORCH_BUILD ?= auto
PRESET ?= demo
OUT    ?= runs/$(PRESET)
LAB_ARGS ?=
# pytest runs quiet through pyproject's addopts (-q); a second -q here would drop its "N passed in Xs" line
# test processes (pytest-xdist): every test runs one torch thread, so one process per core; a file's tests stay in one
# process (module fixtures such as the wheel build run once, and the torchrun tests do not compete with each other)
TEST_JOBS ?= 2

.PHONY: install demo demo-guard test test-fast lab clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile scripts/setup.sh
	PYTHON="$(PYTHON)" VENV="$(VENV)" TORCH_PIN="$(TORCH_PIN)" TORCH_BUILD="$(TORCH_BUILD)" bash scripts/setup.sh
	touch $@

# a second `make demo` would retrain over the first one's runs (15-20 minutes, results replaced) without asking, while
# `islands-kit run` refuses a finished folder: the demo refuses too, and names the two ways on
demo-guard:
	@if [ -z "$(FORCE)" ] && [ -d "$(OUT)" ] && [ -n "$$(find "$(OUT)" -name result.json -print -quit)" ]; then \
		echo "demo: $(OUT) holds finished runs (result.json): \`make demo FORCE=1\` retrains over them, or" \
			"\`make demo OUT=runs/demo-2\` writes a new folder" >&2; exit 2; fi

demo: demo-guard install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/islands-kit notebook compare -p preset $(PRESET) --out $(OUT)
	@# the notebook printed the table, its legend and the wandb lines once: here only where they are kept
	@echo; echo "== the comparison above is also in $(OUT)/compare.txt (every column), .md, .csv and .json;" \
		"print it again with: $(BIN)/islands-kit compare $(OUT)/baseline $(OUT)/two_site $(OUT)/eight_cell"

test: install
	$(BIN)/python -m ruff check .
	$(BIN)/python -m mypy
	WANDB_MODE=disabled $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile
	@# the golden fixtures once more under other CPU kernel sets: a fixture that holds on only one fails here first
	for cap in default avx2; do ATEN_CPU_CAPABILITY=$$cap WANDB_MODE=disabled $(BIN)/python -m pytest tests/test_golden.py -k matches_golden || exit 1; done

# the fast tier: in-process tests only (no torchrun, papermill, CLI subprocesses or kills); about a minute
test-fast: install
	WANDB_MODE=disabled $(BIN)/python -m pytest -m "not slow" -n $(TEST_JOBS) --dist loadfile

# JupyterLab is an optional extra: installed here on first use, not by set-up (most runs never need a server);
# --allow-root where make runs as root (containers), which Jupyter otherwise refuses. Rooted at the checkout (notebooks/
# and runs/ both in view); a kernel runs in notebooks/, so ISLANDS_KIT_BASE_DIR points the notebooks' relative output
# folders (runs/...) at the checkout's runs/, where `islands-kit compare runs/...` finds them. The server config lists
# each notebook once (its jupytext NAME.py source is left out of the listing beside NAME.ipynb).
# LAB_ARGS: more jupyter lab options, e.g. LAB_ARGS="--no-browser --ip=0.0.0.0 --port=8888" on a remote box
LAB_CONFIG := scripts/jupyter_server_config.py
lab: install
	@$(BIN)/python -c "import jupyterlab" 2>/dev/null || { echo "lab: installing JupyterLab (the lab extra) into $(VENV)"; \
		$(BIN)/python -m pip install -q -e ".[lab]"; }
	ISLANDS_KIT_BASE_DIR="$(CURDIR)" $(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --config="$(CURDIR)/$(LAB_CONFIG)" \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

clean:
	rm -rf runs wandb .pytest_cache .mypy_cache .ruff_cache
