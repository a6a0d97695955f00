"""Back-translation in `nmt distill` (distill.monolingual, distill.reverse_teacher): the monolingual lines become
(synthetic source, real target) pairs of the student's data, as many as the filters keep (what they drop reported
with its line numbers), made in chunks that a killed run resumes as the teacher's are; a reverse teacher of the
wrong direction is one line of error. The reverse teacher is the committed tests/fixtures/reverse-model.pt (the demo
model's recipe, de->en)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nmt.distill import pipeline
from nmt.distill.status import figures_line
from nmt.errors import NmtError
from nmt.translation.translator import Translator
from tests.helpers.distilling import Killed, distill_config, read, record_of, stop_at
from tests.helpers.paths import DEMO_MODEL, REVERSE_MODEL

# target lines the filters must drop, by their line number in the monolingual file (1-based) and the filter: an
# empty line, a repeated one; and two that are no German (some filter drops them: which one depends on what the
# reverse model makes of them, the script or langid filter, or the ratio or copy filter before them)
EMPTY, REPEATED, RUSSIAN, ENGLISH = 4, 11, 18, 26
FOREIGN = {RUSSIAN: "Доброе утро, мой дорогой друг.", ENGLISH: "The weather is very nice today in the city."}


def monolingual(raw: dict[str, str], path: Path) -> list[str]:
    """German lines (the demo corpus' test and valid targets) with the bad ones at their numbers; written to path."""
    lines = read(Path(raw["test"] + ".de")) + read(Path(raw["valid"] + ".de"))
    for number in sorted((EMPTY, REPEATED, RUSSIAN, ENGLISH)):
        lines.insert(number - 1, {EMPTY: "", REPEATED: lines[0], **FOREIGN}[number])
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return lines


def backtranslating(mono: Path, *extra: str) -> tuple[str, ...]:
    return (f"distill.monolingual={mono}", f"distill.reverse_teacher={REVERSE_MODEL}", "distill.chunk_lines=20",
            "distill.sample=100", *extra)


def test_backtranslation_adds_the_kept_pairs_and_resumes_inside_its_stage(raw, tmp_path, monkeypatch):
    lines = monolingual(raw, tmp_path / "mono.de")
    settings = backtranslating(tmp_path / "mono.de")
    stop_at(monkeypatch, "student")
    whole = tmp_path / "whole"
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, whole, *settings), progress=False)
    stages = record_of(whole)["stages"]
    bt = stages["backtranslate"]["figures"]
    assert bt["lines"] == bt["read"] == len(lines) == 34 and bt["chunks"] == 2 and bt["sampled"] is False
    assert bt["kept"] == bt["read"] - sum(bt["dropped"].values()) == len(lines) - 4  # the good lines all kept
    dropped = json.loads((whole / "backtranslate" / "report.json").read_text())["samples"]
    assert [s["line"] for s in dropped["empty"]] == [EMPTY] and [s["line"] for s in dropped["duplicate"]] == [REPEATED]
    assert {s["line"] for samples in dropped.values() for s in samples} == {EMPTY, REPEATED, *FOREIGN}
    # the synthetic sources: the reverse model's own translations (its search settings), chunk by chunk
    reverse = Translator.load(REVERSE_MODEL)
    synthetic = read(whole / "backtranslate" / "synthetic.en")
    assert synthetic[:20] == [r.text[0] for r in reverse.translate_chunk(lines[:20])]
    kept = list(zip(read(whole / "backtranslate" / "train.en"), read(whole / "backtranslate" / "train.de")))
    assert len(kept) == bt["kept"] and set(kept) <= set(zip(synthetic, lines))
    assert not {t for _, t in kept} & {"", *FOREIGN.values()}

    data = stages["data"]["figures"]
    pairs = list(zip(read(whole / "distilled" / "train.en"), read(whole / "distilled" / "train.de")))
    assert data["backtranslated_pairs"] == bt["kept"] and len(pairs) == data["teacher_pairs"] + bt["kept"]
    assert pairs[-bt["kept"]:] == kept  # after the teacher's pairs
    assert f"kept {bt['kept']:,} of 34 pairs" in figures_line("backtranslate", bt)
    assert f"{bt['kept']:,} back-translated" in figures_line("data", data)

    real, chunks = Translator.translate_chunk, []

    def dies_in_the_second_chunk(self, lines, **kwargs):
        if self.langs == ("de", "en"):  # the reverse teacher
            if chunks:
                raise Killed
            chunks.append(len(lines))
        return real(self, lines, **kwargs)

    monkeypatch.setattr(Translator, "translate_chunk", dies_in_the_second_chunk)
    pipe = tmp_path / "pipe"
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, pipe, *settings), progress=False)
    stage = record_of(pipe)["stages"]["backtranslate"]
    assert stage["state"] == "running" and stage["figures"]["chunks_done"] == 1
    assert [c.name for c in (pipe / "backtranslate" / "chunks").iterdir()] == ["000000.en"]
    monkeypatch.setattr(Translator, "translate_chunk", real)
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, pipe, *settings), progress=False)
    assert record_of(pipe)["stages"]["backtranslate"]["figures"]["chunks_resumed"] == 1
    for name in ("backtranslate/synthetic.en", "backtranslate/train.en", "distilled/train.en", "distilled/train.de"):
        assert read(pipe / name) == read(whole / name), name


def test_sampled_backtranslation(raw, tmp_path, monkeypatch):
    lines = monolingual(raw, tmp_path / "mono.de")
    stop_at(monkeypatch, "data")
    for name, extra in (("beam", ()), ("sampled", ("distill.teacher_sampling=true",))):
        with pytest.raises(Killed):
            pipeline.run(distill_config(raw, tmp_path / name, *backtranslating(tmp_path / "mono.de", *extra)),
                         progress=False)
    assert record_of(tmp_path / "sampled")["stages"]["backtranslate"]["figures"]["sampled"] is True
    beam, sampled = (read(tmp_path / name / "backtranslate" / "synthetic.en") for name in ("beam", "sampled"))
    assert len(beam) == len(sampled) == len(lines) and sum(a != b for a, b in zip(beam, sampled)) > len(lines) / 10


def test_a_reverse_teacher_of_the_wrong_direction_or_no_text_is_one_line(raw, tmp_path):
    monolingual(raw, tmp_path / "mono.de")
    pipe = tmp_path / "pipe"
    wrong = distill_config(raw, pipe, *backtranslating(tmp_path / "mono.de", f"distill.reverse_teacher={DEMO_MODEL}"))
    with pytest.raises(NmtError) as e:
        pipeline.run(wrong, progress=False)
    assert str(e.value) == f"the reverse teacher {DEMO_MODEL} translates en->de but back-translation needs de->en " \
                           "(data.tgt_lang->data.src_lang)"
    missing = distill_config(raw, pipe, *backtranslating(tmp_path / "none.de"))
    with pytest.raises(NmtError, match=r"^distill.monolingual: no such file: .*none.de$"):
        pipeline.run(missing, progress=False)
    (tmp_path / "empty.de").write_text("")
    with pytest.raises(NmtError, match=r"^distill.monolingual .*empty.de is empty: give target-language text"):
        pipeline.run(distill_config(raw, pipe, *backtranslating(tmp_path / "empty.de")), progress=False)
    assert not pipe.exists()  # refused before any stage
