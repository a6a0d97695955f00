"""The Multi30k recipe on a 1k-pair slice (the hour-long run is `make multi30k`, not CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.config.experiment import Config, DecodeConfig, load_config
from nmt.data.prepare import prepare
from nmt.train.loop import train
from nmt.translation.translator import Translator
from tests.helpers.paths import MULTI30K

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "multi30k.yaml"
pytestmark = pytest.mark.skipif(not (MULTI30K / "train.en").is_file(), reason="../shared/data/multi30k absent")


def slice_corpus(out: Path, langs: tuple[str, ...], n: int) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    prefixes = {}
    for split, src in (("train", "train"), ("valid", "val"), ("test", "test2016")):
        for lang in langs:
            keep = n if split == "train" else 50
            lines = (MULTI30K / f"{src}.{lang}").read_text(encoding="utf-8").split("\n")[:keep]
            (out / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        prefixes[split] = str(out / split)
    return prefixes


@pytest.mark.parametrize("src, tgt", [("en", "de"), ("de", "en"), ("en", "fr")])
def test_recipe_runs_in_every_direction_by_changing_languages_only(tmp_path, src, tgt):
    raw = slice_corpus(tmp_path / "raw", (src, tgt), 1000)
    cfg = load_config(CONFIG, [
        f"data.src_lang={src}", f"data.tgt_lang={tgt}", f"data.dir={tmp_path / 'data'}",
        f"train.run_dir={tmp_path / 'run'}", "data.vocab_size=1000", "data.num_proc=1",
        # shrink only the run length: the architecture and optimiser stay the recipe's
        "train.max_updates=4", "train.max_tokens=1024", "train.save_every=2", "train.valid_every=4",
        "train.valid_bleu_sentences=5", "train.average_last=2", "train.threads=1",
    ])
    cfg.data.train, cfg.data.valid, cfg.data.test = raw["train"], raw["valid"], raw["test"]
    meta = prepare(cfg.data, progress=False)
    assert (meta["src_lang"], meta["tgt_lang"]) == (src, tgt) and meta["splits"]["train"]["pairs"] >= 990
    summary = train(cfg, progress=False)
    assert summary["step"] == 4 and (tmp_path / "run" / "averaged.pt").is_file()
    t = Translator.load(tmp_path / "run" / "averaged.pt", Config(decode=DecodeConfig(beam=2, max_len_b=5)))
    lines = (tmp_path / "raw" / f"test.{src}").read_text(encoding="utf-8").splitlines()[:5]
    assert len(list(t.stream(lines))) == 5


def test_recipe_is_the_small_data_transformer():
    cfg = load_config(CONFIG)
    assert (cfg.model.d_model, cfg.model.encoder_layers, cfg.model.d_ff, cfg.model.dropout) == (128, 4, 256, 0.2)
    assert cfg.train.max_minutes == 60 and cfg.train.average_last == 5 and cfg.decode.beam == 5
