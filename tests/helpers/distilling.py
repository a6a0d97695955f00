"""What the distillation tests share: the settings of a pipeline small enough to run in seconds (the committed demo
model as the teacher, a 2+1-layer d_model 32 student of a few updates), and a corpus with one pair of each kind the
cleaning filters drop."""

from __future__ import annotations

import json
from pathlib import Path

from nmt.config.experiment import Config, load_config
from nmt.distill import pipeline as distill_pipeline

from .paths import DEMO_MODEL

# a student far smaller than the demo model, trained for a handful of updates: the tests check the pipeline, not
# the student's quality (its int8-aware fine-tune is skipped: tests/distill/test_int8_finetune.py runs it; so is the
# report's speed measurement: tests/distill/test_report.py measures it, and the export: tests/distill/test_export.py)
STUDENT = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.encoder_layers=2", "model.decoder_layers=1",
           "model.max_positions=256", "model.dropout=0", "train.max_tokens=512", "train.max_updates=8",
           "train.warmup=4", "train.lr=3e-3", "train.log_every=4", "train.valid_every=1000", "train.save_every=4",
           "train.valid_bleu_sentences=0", "train.average_last=2", "decode.beam=2",
           "distill.int8_finetune_updates=0", "distill.speed_rounds=0", "distill.export=[]"]


def distill_overrides(raw: dict[str, str], pipeline: Path, *extra: str) -> list[str]:
    """--set values of a pipeline over the corpus `raw` (write_demo's prefixes) in `pipeline`, teacher the demo
    model, translated in chunks of 40 lines."""
    return [f"data.train={raw['train']}", f"data.valid={raw['valid']}", f"data.test={raw['test']}",
            "data.vocab_size=150", f"distill.dir={pipeline}", f"distill.teacher={DEMO_MODEL}",
            "distill.chunk_lines=40", *STUDENT, *extra]


def distill_config(raw: dict[str, str], pipeline: Path, *extra: str) -> Config:
    return load_config(None, distill_overrides(raw, pipeline, *extra))


class Killed(Exception):
    """What a test raises to stop a run where a kill would."""


def stop_at(monkeypatch, stage: str) -> None:
    """The pipeline stops when it reaches `stage`, as if killed there."""
    monkeypatch.setitem(distill_pipeline.RUNNERS, stage, lambda *a: (_ for _ in ()).throw(Killed()))


def record_of(pipe: Path) -> dict:
    """A pipeline dir's pipeline.json."""
    return json.loads((pipe / "pipeline.json").read_text())


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# (source, target, the filter that drops it): one pair per filter, between good pairs; `max_chars=80` makes the
# long one too long
GOOD = [("I see three red cars.", "Ich sehe drei rote Autos."),
        ("The train leaves at nine o'clock.", "Der Zug fährt um neun Uhr ab."),
        ("We bought seven cats for nine euros.", "Wir haben sieben Katzen für neun Euro gekauft."),
        ("The big tree is on the street.", "Der große Baum ist auf der Straße."),
        ("Big white teachers are on the table.", "Große weiße Lehrer sind auf dem Tisch."),
        ("She reads 2 books every week.", "Sie liest jede Woche 2 Bücher."),
        ("My brother lives in a small house.", "Mein Bruder wohnt in einem kleinen Haus."),
        ("The children are playing in the garden.", "Die Kinder spielen im Garten.")]
BAD = [
    ("Hello there, my friend.", "", "empty"),
    ("I see three red cars.", "Ich sehe drei rote Autos.", "duplicate"),
    ("The big white teachers are sitting on the long wooden table in the old school house near the river.",
     "Die großen weißen Lehrer sitzen am langen Holztisch im alten Schulhaus nahe dem Fluss, und so weiter.",
     "too_long"),
    ("Yes.", "Ja, das ist ganz sicher und ohne jeden Zweifel richtig so.", "ratio"),
    ("The Beatles", "the  beatles", "copy"),
    ("I have 3 cats and 12 dogs.", "Ich habe 4 Katzen und 12 Hunde.", "digits"),
    ("Good morning, my dear friend.", "Доброе утро, мой дорогой друг.", "script"),
    ("The weather is very nice today in the city.", "Le temps est très beau aujourd'hui dans la ville.", "langid"),
]


def write_dirty_corpus(folder: Path) -> tuple[str, dict[str, int]]:
    """GOOD and BAD interleaved as corpus files FOLDER/train.en/.de; returns the prefix and each bad pair's line."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs, lines = [], {}
    for i, (src, tgt, name) in enumerate(BAD):
        pairs.append(GOOD[i])
        pairs.append((src, tgt))
        lines[name] = len(pairs)
    for lang, side in (("en", 0), ("de", 1)):
        (folder / f"train.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return str(folder / "train"), lines
