# Every target installs what it needs first, so each works on a fresh machine.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
MULTI30K ?= ../shared/data/multi30k
SRC ?= en
TGT ?= de
STAMP := .install.stamp

.PHONY: install demo test lint bench-prepare bench-train bench-translate multi30k clean

# torch first, pinned to the CPU wheel when missing, so pip never pulls a multi-GB CUDA build;
# a GPU user installs their own torch beforehand and it is kept.
$(STAMP): pyproject.toml
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev,plot]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PYTHON) -m nmt prepare --config configs/tiny.yaml --demo
	$(PYTHON) -m nmt train --config configs/tiny.yaml
	$(PYTHON) -m nmt translate --config configs/tiny.yaml --input data/demo/test.en --output runs/tiny/test.hyp.de
	$(PYTHON) -m nmt score --ref data/demo/test.de --hyp runs/tiny/test.hyp.de
	@echo "--- a few demo translations:"
	@head -n 5 data/demo/test.en | $(PYTHON) -m nmt translate --config configs/tiny.yaml

test: $(STAMP)
	$(PYTHON) -m pytest -q

lint: $(STAMP)
	$(PYTHON) -m ruff check nmt tests bench

bench-prepare: $(STAMP)
	$(PYTHON) bench/prepare.py --data $(MULTI30K)

bench-train: $(STAMP)
	$(PIP) install -q -e ".[bench]"
	$(PYTHON) bench/train.py

bench-translate: $(STAMP)
	$(PIP) install -q -e ".[bench]"
	$(PYTHON) bench/translate.py

clean:
	rm -rf data/demo data/demo-raw runs/tiny $(STAMP)
