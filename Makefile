# The Annotated Transformer, rebuilt. `make run` executes the notebook and renders the
# blog page; `make test` runs every test. Both create or refresh .venv themselves.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NB := annotated_transformer
EX := exercises
SINCE := since_2017
# Use the local Multi30k copy beside the checkout when there is one (no download).
SHARED_DATA := $(abspath ../shared/data/multi30k)
ifneq ($(wildcard $(SHARED_DATA)/train.de.gz),)
export MULTI30K_DIR ?= $(SHARED_DATA)
endif
# Idle OpenMP threads sleep instead of spinning, so that a core used by another program
# costs its share and no more (Setup in the notebook explains; pytest imports torch
# before the notebook's own cell could set it).
export OMP_WAIT_POLICY ?= PASSIVE
# PRESET reaches the programs through the environment only ($AT_PRESET, quoted where a
# recipe names it: --preset "$$AT_PRESET"), read with $(value ...) so that neither make
# nor the shell runs what it holds (a quote or a $(...) in it is a bad name, never a
# command); check-preset refuses a name that is not a preset's before any work.
PRESET ?=
unexport PRESET
ifneq ($(value PRESET),)
export AT_PRESET := $(value PRESET)
PRESET_ARG := --preset "$$AT_PRESET"
endif

.PHONY: help setup check-preset run execute exercises since readme page figures test test-fast test-js js-golden schema pytest lint format sync export train seeds bench precision freeze clean

help:
	@echo "make run    - execute the notebook end to end (outputs into $(NB).ipynb) and render docs/index.html"
	@echo "             (and the exercises, $(EX).ipynb, into docs/$(EX).html)"
	@echo "make exercises - execute $(EX).ipynb (stubs unfilled) and render docs/$(EX).html (seconds)"
	@echo "make since PRESET=cpu - execute $(SINCE).ipynb (every row trained or loaded, resumable;"
	@echo "             about two hours on 2 CPU cores) and render docs/$(SINCE).html"
	@echo "make page   - render docs/index.html, docs/$(EX).html and docs/$(SINCE).html from the notebooks"
	@echo "             (nbconvert + KaTeX, --strict),"
	@echo "             and docs/translate.html for the model in docs/translate/ (python -m tools.export_model --page-only)"
	@echo "make test   - pytest (the notebook executed once as on Colab, ci preset) + nbval on $(EX).ipynb + ruff"
	@echo "make test-fast - the tests that need no training, process, browser, notebook or Multi30k (< 1 min)"
	@echo "make figures - draw images/*.svg and *.png (images/draw_figures.py)"
	@echo "make sync   - update $(NB).ipynb's, $(EX).ipynb's and $(SINCE).ipynb's cells from their .md"
	@echo "             (outputs kept)"
	@echo "make export - write annotated_transformer_lib.py, the notebook's library cells (committed)"
	@echo "make lint / make format - ruff on the Python files and the notebook's code; make lint runs"
	@echo "             eslint on the JavaScript too (installs node_modules from package-lock.json)"
	@echo "make test-js - the JavaScript unit tests (node --test tests/js/), against tests/js/golden/"
	@echo "make js-golden - write tests/js/golden/ again from the notebook's code (tools/js_golden.py)"
	@echo "make schema - write the model file's schema, atkit/page/model_schema.json (tools/model_schema.py)"
	@echo "make train PRESET=cpu   - train Part 3's model outside Jupyter (results/<preset>-multi30k.json)"
	@echo "make seeds PRESET=cpu   - Part 3's and Part 4's models with seeds 0 1 2 (runs/seed-spread-<preset>.json)"
	@echo "make bench              - didactic vs fast training step: tokens/s, FLOP/s, memory (MFU on a GPU)"
	@echo "                           PRESET=gpu: the gpu preset's model, beside its target (5x, 300,000 tok/s on an H100)"
	@echo "make precision PRESET=cpu - Part 3's model in the precision \"auto\" picks and in fp32: losses, BLEU"
	@echo "PRESET=ci|cpu|gpu overrides the hardware default for run/train."

setup: $(STAMP)

# $AT_PRESET (PRESET=..., or the environment's) against atkit/config.py's names.
check-preset: setup
	@$(PY) -c 'import os, sys; from atkit.config import preset_names as names; \
		p = os.environ.get("AT_PRESET"); p is None or p in names() or sys.exit( \
		f"make: PRESET (AT_PRESET) {p!r} is not a preset; use one of {list(names())}")'

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	@touch $(STAMP)

sync: setup
	$(PY) -m jupytext --to ipynb --update $(NB).md $(EX).md $(SINCE).md

export: setup
	$(PY) nbexport.py

# AT_PROGRESS=0: the committed notebook keeps one line per evaluation, not every
# refresh of a progress bar (they stay live in Jupyter).
EXECUTE = AT_PROGRESS=0 $(PY) -m jupyter nbconvert --to notebook --execute --inplace \
	--ExecutePreprocessor.timeout=-1 --ExecutePreprocessor.kernel_name=python3

execute: check-preset sync export
	$(EXECUTE) $(NB).ipynb
	$(EXECUTE) $(EX).ipynb

page: setup
	$(PY) -m tools.render_page --strict --notebook $(NB).ipynb --out docs/index.html
	$(PY) -m tools.render_page --strict --notebook $(EX).ipynb --out docs/$(EX).html
	$(PY) -m tools.render_page --strict --notebook $(SINCE).ipynb --out docs/$(SINCE).html
	$(PY) -m tools.export_model --page-only --out docs

# The four drawings (SVG and the PNG the notebook shows), byte-identical run to run.
figures: setup
	$(PY) images/draw_figures.py

# The exercises alone (their stubs unfilled: every check says "not done yet").
exercises: sync export
	$(EXECUTE) $(EX).ipynb
	$(PY) -m tools.render_page --strict --notebook $(EX).ipynb --out docs/$(EX).html

# Since 2017: every row of its table trained (or loaded, when checkpoints/<preset>/
# since_2017/ holds it finished; an interrupted run resumes), measured and rendered.
since: check-preset sync export
	$(EXECUTE) $(SINCE).ipynb
	$(PY) -m tools.render_page --strict --notebook $(SINCE).ipynb --out docs/$(SINCE).html

readme: setup
	$(PY) -m tools.readme_results --notebook $(NB).ipynb

run: execute readme page
	@echo "executed $(NB).ipynb and $(EX).ipynb, copied the results into README.md, rendered docs/index.html and docs/$(EX).html"

# eslint from the npm registry, at the versions of package-lock.json (npm ci), installed
# again when the lock file changes.
NODE_STAMP := node_modules/.installed

$(NODE_STAMP): package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NODE_STAMP)

# nbexport.py --check: the committed annotated_transformer_lib.py is what the notebook's
# library cells give (make export writes it again).
lint: setup $(NODE_STAMP)
	$(PY) nbexport.py --check
	$(PY) -m ruff check . $(NB).ipynb $(EX).ipynb $(SINCE).ipynb
	$(PY) -m ruff format --check . $(NB).ipynb $(EX).ipynb $(SINCE).ipynb
	node_modules/.bin/eslint .

# The JavaScript of the pages (atkit/page/translator.js, atkit/page/attention_view.js) on Node's
# own test runner, against golden files the notebook's Python code writes (js-golden;
# tests/test_js_golden.py fails when they are stale). Needs nothing from npm.
test-js:
	node --test tests/js/

js-golden: export
	$(PY) -m tools.js_golden

# The model file's schema (atkit/page/model_schema.json), which Python and the page
# check a model file against; its search options' bounds come from the notebook's
# SEARCHES (tests/test_translate.py fails when it is stale).
schema: export
	$(PY) -m tools.model_schema

format: setup
	$(PY) -m jupytext --pipe "$(abspath $(VENV))/bin/ruff format --stdin-filename cell.py -" $(NB).md $(EX).md $(SINCE).md
	@# the pipe leaves extra blank lines around cells; keep one
	for nb in $(NB).md $(EX).md $(SINCE).md; do $(PY) -c "import re,pathlib as p; f=p.Path('$$nb'); \
		s=f.read_text(); s=re.sub(r'\n\n\n+(\x60\x60\x60python)', r'\n\n\1', s); \
		f.write_text(re.sub(r'(\n\x60\x60\x60\n)\n\n+', r'\1\n', s))"; done
	$(PY) -m ruff format .
	$(MAKE) sync

# The tests run in the small `ci` preset whatever the hardware. The notebook itself is
# executed once, as Colab runs it (tests/test_colab.py, which also compares the cells
# tagged nbval-check-output with the committed outputs), and so is since_2017.ipynb
# (tests/test_since_2017.py); nbval runs the exercises.
# Two pytest-xdist workers share the cores with that run; the tests that share a
# trained run go to one worker (tests/conftest.py groups them), so none trains twice.
WORKERS ?= 2
pytest: setup export
	AT_PRESET=ci $(PY) -m pytest tests $(EX).ipynb --nbval-lax --nbval-current-env \
		-p no:cacheprovider -n $(WORKERS) --dist loadgroup --durations=10 $(PYTEST_ARGS)

test: lint pytest test-js

# The inner loop: the tests that need no training, no other process, no browser, no
# executed notebook and no Multi30k (pytest.ini's markers), in under a minute, in a
# clone with no data beside it; the slowest five are named, so that a slow test that
# lost its marker shows (tests/conftest.py fails one that reads Multi30k).
FAST := not (training or process or browser or notebook or data)
test-fast: setup export
	AT_PRESET=ci $(PY) -m pytest tests -m "$(FAST)" -q -p no:cacheprovider -n $(WORKERS) \
		--durations=5 $(PYTEST_ARGS)
	node --test --test-reporter=dot tests/js/

train: check-preset export
	$(PY) -m tools.train $(PRESET_ARG) $(TRAIN_ARGS)

# How far the seed alone moves the scores: Part 4's table reads the summary.
seeds: check-preset export
	$(PY) -m tools.seed_spread $(PRESET_ARG) $(SEEDS_ARGS)

# Didactic vs fast training step, same model and batches; prints tokens/s, FLOP/s,
# memory, MFU on a GPU, and the target (set for the gpu preset's own model on one H100).
# The preset's model; PRESET=gpu for the gpu preset's (N=6, d_model=512, vocab 8000);
# Table 3's base sizes: make bench PRESET=gpu BENCH_ARGS="--size base"
bench: check-preset export
	$(PY) -m tools.bench $(PRESET_ARG) $(BENCH_ARGS)

# Does low precision cost quality? Part 3's model in the precision "auto" picks here
# (bf16, or fp16 on an older GPU) and in fp32; nothing to compare where "auto" is fp32.
precision: check-preset export
	$(PY) -m tools.precision_check $(PRESET_ARG) $(PRECISION_ARGS)

freeze: setup
	$(PY) -m pip freeze | sed 's/+cpu$$//' > /tmp/at-freeze.txt && echo "see /tmp/at-freeze.txt"

clean:
	rm -rf build .pytest_cache .ruff_cache
