# Every target installs what it needs first, so each works on a fresh machine.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
MULTI30K ?= ../shared/data/multi30k
SRC ?= en
TGT ?= de
TRAIN_ARGS ?=
# one stamp per Python environment: a new venv installs everything again, even in a tree that had one
STAMP := .install.$(shell $(PYTHON) -c "import hashlib, sys; print(hashlib.sha1(sys.prefix.encode()).hexdigest()[:8])").stamp

.PHONY: install libretranslate demo demo-zh demo-distill test lint bench-prepare bench-train bench-translate gpu gpu-mfu multi30k clean

# torch first, pinned to the CPU wheel when missing, so pip never pulls a multi-GB CUDA build;
# a GPU user installs their own torch beforehand and it is kept.
$(STAMP): pyproject.toml
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev,plot,serve,export,documents]"
	@touch $(STAMP)

install: $(STAMP)

# LibreTranslate in a venv of its own (it pins rich<13 and numpy<2, which nmt's environment cannot hold), as it is
# deployed beside nmt: tests/interop/test_export_argos.py serves an exported model with it (and skips without it)
LT_VENV := .venv-libretranslate
libretranslate: $(LT_VENV)/bin/libretranslate
$(LT_VENV)/bin/libretranslate:
	$(PYTHON) -m venv $(LT_VENV)
	$(LT_VENV)/bin/pip install -q libretranslate==1.9.6

demo: $(STAMP)
	$(PYTHON) -m nmt prepare --config configs/tiny.yaml --demo
	@t=$$(date +%s); $(PYTHON) -m nmt train --config configs/tiny.yaml \
	  && echo "[time] train: $$(( $$(date +%s) - t )) s (a fixed 800 updates: a busy machine takes longer, same model)"
	$(PYTHON) -m nmt translate --config configs/tiny.yaml --input data/demo/test.en --output runs/tiny/test.hyp.de
	$(PYTHON) -m nmt score --ref data/demo/test.de --hyp runs/tiny/test.hyp.de
	@echo "--- a few demo translations:"
	@head -n 5 data/demo/test.en | $(PYTHON) -m nmt translate --config configs/tiny.yaml
	@head -n 1 data/demo/test.en | $(PYTHON) -m nmt translate --config configs/tiny.yaml --attention runs/tiny/attention >/dev/null \
	  && echo "--- what the model looked at, translating \"$$(head -n 1 data/demo/test.en)\": open runs/tiny/attention/000001.png"
	@echo "--- the same line walked through the model, the paper's every mechanism with its numbers (nmt explain):"
	@$(PYTHON) -m nmt explain --checkpoint runs/tiny "$$(head -n 1 data/demo/test.en)"

# The English→Chinese demo: the same pipeline on the built-in Chinese corpus; BLEU uses sacreBLEU's zh tokenizer
# (chosen for the target language, from test.zh).
demo-zh: $(STAMP)
	$(PYTHON) -m nmt prepare --config configs/tiny-zh.yaml --demo
	@t=$$(date +%s); $(PYTHON) -m nmt train --config configs/tiny-zh.yaml \
	  && echo "[time] train: $$(( $$(date +%s) - t )) s (a fixed 800 updates: a busy machine takes longer, same model)"
	$(PYTHON) -m nmt translate --config configs/tiny-zh.yaml --input data/demo-zh/test.en --output runs/tiny-zh/test.hyp.zh
	$(PYTHON) -m nmt score --ref data/demo-zh/test.zh --hyp runs/tiny-zh/test.hyp.zh
	@echo "--- a few demo translations:"
	@head -n 5 data/demo-zh/test.en | $(PYTHON) -m nmt translate --config configs/tiny-zh.yaml

# Distillation on the demo corpus: the committed demo model (2+2 layers) as the teacher, a 3+1-layer student
# (configs/distill-demo.yaml); clean -> teacher -> data -> student -> student-int8 -> score -> report in
# runs/distill-demo (report.html), then its stages.
# TEACHER=runs/tiny distils the model `make demo` trains instead.
TEACHER ?= tests/fixtures/demo-model.pt
demo-distill: $(STAMP)
	$(PYTHON) -m nmt prepare --config configs/tiny.yaml --demo
	@t=$$(date +%s); $(PYTHON) -m nmt distill --config configs/distill-demo.yaml --teacher $(TEACHER) \
	  && echo "[time] distill: $$(( $$(date +%s) - t )) s"
	$(PYTHON) -m nmt info runs/distill-demo

# one pytest worker per core of the 2-core CI machine, a test module (and its module fixtures) per worker at a time;
# a bigger machine may give more: `make test TEST_WORKERS=8` (0: one process, as plain `python -m pytest`)
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadscope

lint: $(STAMP)
	$(PYTHON) -m ruff check nmt tests bench

bench-prepare: $(STAMP)
	$(PYTHON) bench/prepare.py --data $(MULTI30K)

bench-train: $(STAMP)
	$(PIP) install -q -e ".[bench]"
	$(PYTHON) bench/train.py

bench-translate: $(STAMP)
	$(PIP) install -q -e ".[bench]"
	$(PYTHON) bench/translate.py $(ARGS)

# The GPU loop, in <= 9 minutes on one H100: the tests marked gpu, then the benches on the GPU (training base and big
# in bf16 at 16,384 tokens, the GPU configs at their own max_tokens with torch.compile, base in fp16, with MFU and
# peak memory; decoding base in fp16 at batch 32 and 1, its steps as CUDA graphs (--compile) and eager, against
# CTranslate2 in float16, which is skipped with its reason where it cannot load). 10 timed updates and 3 timed decoding calls per contestant: the GPU is steady.
gpu: $(STAMP)
	@$(PYTHON) -c "import torch; assert torch.cuda.is_available()" 2>/dev/null \
	  || { echo "make gpu: torch sees no CUDA GPU here (no GPU, or a CPU-only torch: install a CUDA build first)"; exit 1; }
	$(PIP) install -q -e ".[bench]"
	$(PYTHON) -m pytest -m gpu -v -rs
	$(PYTHON) bench/train.py --device cuda --configs base,big --dtype bf16 --vocab 32000 --max-tokens 16384 --steps 10
	$(PYTHON) bench/train.py --device cuda --configs base-gpu,big-gpu --dtype bf16 --vocab 32000 --own-settings --steps 10
	$(PYTHON) bench/train.py --device cuda --configs base --dtype fp16 --vocab 32000 --max-tokens 16384 --steps 10
	$(PYTHON) bench/translate.py --device cuda --configs base --dtype fp16 --batches 32,1 --repeats 3 --compile

# issue 48's candidates on a GPU, one short run: their GPU tests (no host wait, varlen attention = padded), the
# compiled loss alone, then ours padded and packed, model and loss compiled, beside Marian at the paper's batch
gpu-mfu: $(STAMP)
	@$(PYTHON) -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || { echo "make gpu-mfu: no CUDA GPU"; exit 1; }
	$(PIP) install -q -e ".[bench]"
	$(PYTHON) -m pytest -m gpu -q tests/gpu/test_gpu_packed.py tests/gpu/test_gpu_update.py tests/gpu/test_gpu_graphs.py
	$(PYTHON) bench/loss.py --device cuda --rows 25000 --dtypes bf16
	$(PYTHON) bench/train.py --device cuda --configs base,big --dtype bf16 --vocab 32000 --max-tokens 25000 --steps 10 \
	  --compile --compile-loss --packed
	$(PYTHON) bench/train.py --device cuda --configs base --dtype bf16 --vocab 32000 --max-tokens 25000 --steps 10 \
	  --compile-mode reduce-overhead --compile-loss --packed

# Multi30k: prepare -> train (60-minute budget) -> translate test2016 -> score, timing each stage.
M30_DATA := data/multi30k-$(SRC)-$(TGT)
M30_RUN := runs/multi30k-$(SRC)-$(TGT)
multi30k: $(STAMP)
	@t=$$(date +%s); $(PYTHON) -m nmt prepare --config configs/multi30k.yaml --train $(MULTI30K)/train \
	  --valid $(MULTI30K)/val --test $(MULTI30K)/test2016 --src-lang $(SRC) --tgt-lang $(TGT) --data-dir $(M30_DATA) \
	  && echo "[time] prepare: $$(( $$(date +%s) - t )) s"
	@t=$$(date +%s); $(PYTHON) -m nmt train --config configs/multi30k.yaml --data-dir $(M30_DATA) --run-dir $(M30_RUN) $(TRAIN_ARGS) \
	  && echo "[time] train: $$(( $$(date +%s) - t )) s"
	@t=$$(date +%s); $(PYTHON) -m nmt translate --config configs/multi30k.yaml --checkpoint $(M30_RUN)/averaged.pt \
	  --input $(MULTI30K)/test2016.$(SRC) --output $(M30_RUN)/test2016.hyp.$(TGT) \
	  && echo "[time] translate: $$(( $$(date +%s) - t )) s"
	$(PYTHON) -m nmt score --ref $(MULTI30K)/test2016.$(TGT) --hyp $(M30_RUN)/test2016.hyp.$(TGT) --metrics bleu,chrf

clean:
	rm -rf data/demo data/demo-raw runs/tiny runs/distill-demo data/demo-zh data/demo-zh-raw runs/tiny-zh .install.*stamp
