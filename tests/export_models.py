"""The models `nmt export` is proven on (session fixtures shared by tests/test_export_*.py), one of each kind
the exporters must handle, and the 100 test lines they translate:

- tiny: the demo model (tests/fixtures/demo-model.pt): post-norm, interleaved sinusoids, joint vocabulary, tied, relu
- prenorm: the Multi30k config's shape (4+4 layers, d_model 128, 4 heads, d_ff 256, pre-norm), with gelu and
  Marian's sin/cos halves, briefly trained on the demo corpus
- separate: separate source/target vocabularies and untied embeddings, post-norm, briefly trained
- marian: a Hugging Face MarianMTModel (swish, halves, scaled embeddings, a logits bias, <pad> last), trained
  by tests/fixtures/make_marian_model.py and committed in tests/fixtures/marian-en-de, brought in with `nmt import`

tests/conftest.py registers the fixtures once, so every test module shares one build per session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.config.experiment import load_config
from nmt.data.prepare import prepare
from nmt.rundir import RunDir
from nmt.train.loop import train
from tests.helpers.paths import DEMO_MODEL, MARIAN_MODEL

from .conftest import tiny_config

KINDS = ("tiny", "prenorm", "separate", "marian")


@pytest.fixture(scope="session")
def export_lines(demo_raw) -> list[str]:
    """The demo corpus' 100 test sentences (English)."""
    return Path(demo_raw["test"] + ".en").read_text(encoding="utf-8").splitlines()[:100]


@pytest.fixture(scope="session")
def export_models(tmp_path_factory, demo_raw, demo_data) -> dict[str, Path]:
    """kind -> checkpoint path, for every kind in KINDS (built on first use, once per session)."""
    root = tmp_path_factory.mktemp("export-models")
    return {"tiny": DEMO_MODEL, "prenorm": _prenorm(root, demo_data),
            "separate": _separate(root, demo_raw), "marian": _marian(root)}


def _trained(data: Path, run: Path, *overrides: str) -> Path:
    cfg = tiny_config(data, run, "model.dropout=0", "train.max_tokens=1024", "train.lr=5e-3", "train.warmup=30",
                      "train.save_every=100", "train.log_every=100", "train.valid_bleu_sentences=0",
                      "train.average_last=0", *overrides)
    train(cfg, progress=False)
    return RunDir(run).last


def _prenorm(root: Path, data: Path) -> Path:
    return _trained(data, root / "prenorm", "model.d_model=128", "model.n_heads=4", "model.d_ff=256",
                    "model.encoder_layers=4", "model.decoder_layers=4", "model.pre_norm=true",
                    "model.activation=gelu", "model.position_layout=halves", "train.max_updates=150",
                    "train.clip_norm=1.0", "train.lr=3e-3")


def _separate(root: Path, raw: dict[str, str]) -> Path:
    data = root / "separate-data"
    cfg = load_config(None, [f"data.dir={data}", "data.vocab_size=300", "data.joint_vocab=false"]).data
    cfg.train, cfg.valid, cfg.test = raw["train"], raw["valid"], raw["test"]
    prepare(cfg, progress=False)
    return _trained(data, root / "separate", "model.d_model=64", "model.n_heads=4", "model.d_ff=128",
                    "model.encoder_layers=2", "model.decoder_layers=2", "model.share_all_embeddings=false",
                    "train.max_updates=200")


def _marian(root: Path) -> Path:
    from nmt.interop.marian import import_model

    return import_model(str(MARIAN_MODEL), root / "marian.pt", src_lang="en", tgt_lang="de")
