"""The cleaning filters of `nmt distill` (nmt.distill.filters): on a corpus with one pair of each bad kind between
good pairs, each filter drops exactly its pair, counts it and keeps it, with its corpus line, as the evidence that
clean/report.json and the terminal show."""

from __future__ import annotations

import json

import pytest

from nmt.config.distill import DistillConfig
from nmt.distill import stages
from nmt.distill.filters import FILTERS, Cleaner, numbers, script_share
from nmt.distill.pipeline import settings
from nmt.distill.state import Pipeline
from nmt.errors import NmtError
from tests.helpers.distilling import BAD, GOOD, distill_config, write_dirty_corpus


def test_each_filter_drops_its_pair_and_shows_it(tmp_path):
    cleaner = Cleaner(DistillConfig(max_chars=80), "en", "de")
    pairs = []
    for i, (src, tgt, _) in enumerate(BAD):
        pairs += [GOOD[i], (src, tgt)]
    kept = [line for line, (src, tgt) in enumerate(pairs, 1) if cleaner.keep(line, src, tgt)]
    assert kept == list(range(1, len(pairs), 2))  # every good pair, no bad one
    report = cleaner.report()
    assert report["dropped"] == dict.fromkeys(FILTERS, 1)
    assert (report["read"], report["kept"]) == (len(pairs), len(GOOD))
    for i, (src, tgt, name) in enumerate(BAD):
        (sample,) = report["samples"][name]
        assert (sample["line"], sample["src"], sample["tgt"]) == (2 * i + 2, src, tgt)
    assert report["samples"]["langid"][0]["why"].startswith("target identified as fr")
    assert report["samples"]["digits"][0]["why"] == "numbers 12 3 vs 12 4"
    assert "CYRILLIC" not in report["samples"]["script"][0]["why"] and "0% of its letters in LATIN" in \
        report["samples"]["script"][0]["why"]


def test_samples_are_capped_and_counts_are_not():
    cleaner = Cleaner(DistillConfig(sample=2), "en", "de")
    for line in range(1, 6):
        cleaner.keep(line, f"Room {line} is free.", f"Zimmer {line + 1} ist frei.")
    report = cleaner.report()
    assert report["dropped"]["digits"] == 5 and [s["line"] for s in report["samples"]["digits"]] == [1, 2]


def test_filters_can_be_turned_off():
    off = DistillConfig(dedup=False, copies=False, digits=False, script_share=0, langid_min_prob=0, max_chars=0)
    cleaner = Cleaner(off, "en", "de")
    assert all(cleaner.keep(i, src, tgt) for i, (src, tgt, name) in enumerate(BAD, 1)
               if name not in ("empty", "ratio"))
    assert cleaner.report()["filters"] == ["prepare"]


def test_numbers_and_scripts():
    assert numbers("It costs 1,000.50 at 10:30") == numbers("Es kostet 1.000,50 um 10.30") == ["100050", "1030"]
    assert numbers("three") == [] and numbers("for 2.00 euros") == numbers("für 2 Euro") == ["2"]
    assert numbers("1,000 people") == ["1000"]
    keep = Cleaner(DistillConfig(langid_min_prob=0), "en", "de")
    assert keep.keep(1, "A man with five buckets.", "Ein Mann mit 5 Eimern.")  # one side spells the number
    assert not keep.keep(2, "A man with 4 buckets.", "Ein Mann mit 5 Eimern.")
    assert script_share("Привет, Bob", {"CYRILLIC"}) == pytest.approx(6 / 9)
    assert script_share("42 !", {"LATIN"}) is None  # no letters: nothing to judge


def test_a_language_without_a_known_script_or_spaces_is_noted_not_judged():
    report = Cleaner(DistillConfig(langid_min_prob=0), "en", "zh").report()
    assert "ratio: off, zh is written without spaces" in report["notes"]
    assert Cleaner(DistillConfig(langid_min_prob=0), "en", "xx").report()["notes"] == [
        "script: no script known for 'xx', its side is not checked"]


def test_the_clean_stage_writes_the_report_and_the_kept_pairs(tmp_path, capsys):
    prefix, lines = write_dirty_corpus(tmp_path / "corpus")
    cfg = distill_config({"train": prefix, "valid": prefix, "test": prefix}, tmp_path / "pipe", "distill.max_chars=80")
    pipe = Pipeline(cfg.distill.dir, settings(cfg))
    try:
        figures = stages.clean(cfg, pipe, False)
    finally:
        pipe.release()
    report = json.loads((tmp_path / "pipe" / "clean" / "report.json").read_text(encoding="utf-8"))
    assert figures["dropped"] == report["dropped"] == dict.fromkeys(FILTERS, 1)
    assert {name: s[0]["line"] for name, s in report["samples"].items()} == lines
    kept = (tmp_path / "pipe" / "clean" / "train.de").read_text(encoding="utf-8").splitlines()
    assert kept == [t for _, t in GOOD]
    assert (tmp_path / "pipe" / "clean" / "lines.txt").read_text().split() == [str(n) for n in range(1, 16, 2)]
    err = capsys.readouterr().err
    assert "clean: read 16, kept 8" in err and "Доброе утро" in err


def test_a_corpus_with_nothing_left_is_one_line_error_with_its_report(tmp_path):
    folder = tmp_path / "copies"
    folder.mkdir()
    for lang in ("en", "de"):
        (folder / f"train.{lang}").write_text("Hello\nBerlin\n", encoding="utf-8")
    cfg = distill_config({"train": str(folder / "train"), "valid": "", "test": ""}, tmp_path / "pipe")
    pipe = Pipeline(cfg.distill.dir, settings(cfg))
    try:
        with pytest.raises(NmtError, match=r"has no pair left after cleaning \(2 read\); what each filter") as e:
            stages.clean(cfg, pipe, False)
    finally:
        pipe.release()
    assert "\n" not in str(e.value)
    assert json.loads((tmp_path / "pipe" / "clean" / "report.json").read_text())["dropped"]["copy"] == 2
