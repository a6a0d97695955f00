"""The models `nmt export` is proven on (tests/interop/test_export_*.py; the fixtures export_models and export_lines
of tests/interop/conftest.py), one of each kind the exporters must handle, and how each is made:

- tiny: the demo model (tests/fixtures/demo-model.pt): post-norm, interleaved sinusoids, joint vocabulary, tied, relu
- prenorm: the Multi30k config's shape (4+4 layers, d_model 128, 4 heads, d_ff 256, pre-norm), with gelu and
  Marian's sin/cos halves, briefly trained on the demo corpus (committed: tests/fixtures/export-prenorm.pt)
- separate: separate source/target vocabularies and untied embeddings, post-norm, briefly trained (committed:
  tests/fixtures/export-separate.pt; both made by tests/fixtures/make_export_models.py with `prenorm` and `separate`
  below)
- marian: a Hugging Face MarianMTModel (swish, halves, scaled embeddings, a logits bias, <pad> last), trained
  by tests/fixtures/make_marian_model.py and committed in tests/fixtures/marian-en-de, brought in with `nmt import`
"""

from __future__ import annotations

from pathlib import Path

import torch

from nmt import checkpoint
from nmt.config.experiment import DecodeConfig, load_config
from nmt.data.prepare import prepare
from nmt.rundir import RunDir
from nmt.train.loop import train
from nmt.translation.translator import Translator

from .paths import MARIAN_MODEL
from .training import tiny_config

KINDS = ("tiny", "prenorm", "separate", "marian")
MAX_NEW = 100  # new tokens generate() may add (max_length: + the start token); nmt: 99 tokens + EOS


def trained(data: Path, run: Path, *overrides: str) -> Path:
    cfg = tiny_config(data, run, "model.dropout=0", "train.max_tokens=1024", "train.lr=5e-3", "train.warmup=30",
                      "train.save_every=100", "train.log_every=100", "train.valid_bleu_sentences=0",
                      "train.average_last=0", *overrides)
    train(cfg, progress=False)
    return RunDir(run).last


def prenorm(root: Path, data: Path) -> Path:
    return trained(data, root / "prenorm", "model.d_model=128", "model.n_heads=4", "model.d_ff=256",
                   "model.encoder_layers=4", "model.decoder_layers=4", "model.pre_norm=true",
                   "model.activation=gelu", "model.position_layout=halves", "train.max_updates=150",
                   "train.clip_norm=1.0", "train.lr=3e-3")


def separate(root: Path, raw: dict[str, str]) -> Path:
    data = root / "separate-data"
    cfg = load_config(None, [f"data.dir={data}", "data.vocab_size=300", "data.joint_vocab=false"]).data
    cfg.train, cfg.valid, cfg.test = raw["train"], raw["valid"], raw["test"]
    prepare(cfg, progress=False)
    return trained(data, root / "separate", "model.d_model=64", "model.n_heads=4", "model.d_ff=128",
                   "model.encoder_layers=2", "model.decoder_layers=2", "model.share_all_embeddings=false",
                   "train.max_updates=200")


def marian(root: Path) -> Path:
    from nmt.interop.marian import import_model

    return import_model(str(MARIAN_MODEL), root / "marian.pt", src_lang="en", tgt_lang="de")


# ------------------------------------------------ `--to hf`: transformers' generate() beside nmt's search


def hf_translate(model, tok, lines: list[str], beam: int) -> list[str]:
    """generate() with the exported generation_config.json (its length penalty, bad words, start token)."""
    inputs = tok(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**inputs, num_beams=beam, do_sample=False, max_length=MAX_NEW + 1)  # <s> + 100
    return tok.batch_decode(out, skip_special_tokens=True)


def nmt_translate(path: Path, lines: list[str], beam: int, alpha: float) -> list[str]:
    """nmt's own search, in generate's terms: the average length penalty with the exported alpha."""
    settings = DecodeConfig(beam=beam, max_len_a=0.0, max_len_b=MAX_NEW - 1, length_penalty=alpha,
                            length_penalty_type="average")
    translator = Translator(checkpoint.load(path), settings, dtype="fp32")
    return [r.text[0] for r in translator.translate_chunk(lines)]


def same(kind: str, what: str, ours: list[str], theirs: list[str]) -> int:
    """How many lines are identical; the others printed for the record."""
    differ = [(i, o, t) for i, (o, t) in enumerate(zip(ours, theirs)) if o != t]
    for i, o, t in differ:
        print(f"{kind} {what} line {i}: nmt {o!r} vs {t!r}")
    print(f"{kind} {what}: {len(ours) - len(differ)}/{len(ours)} identical")
    return len(ours) - len(differ)
