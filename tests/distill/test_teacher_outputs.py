"""The teacher's n-best and sampled translations as the student's data (distill.teacher_nbest,
distill.teacher_sampling): N pairs per source, in the chunk files' stated order; sampled outputs that differ from the
beam's and repeat exactly for a seed, across a kill inside the teacher too; a beam below the n-best refused in one
line; a pipeline dir made before these keys taken as it is."""

from __future__ import annotations

import json

import pytest

from nmt.distill import pipeline
from nmt.distill.page import data_section
from nmt.distill.status import figures_line
from nmt.errors import ConfigError, NmtError
from nmt.translation.translator import Translator
from tests.helpers.distilling import Killed, distill_config, read, record_of, stop_at
from tests.helpers.paths import DEMO_MODEL

SAMPLED = ("distill.teacher_sampling=true", "distill.teacher_nbest=2")  # two samples per source, the better first


def test_nbest_gives_n_pairs_per_source(raw, tmp_path, monkeypatch):
    stop_at(monkeypatch, "student")
    pipe = tmp_path / "pipe"
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, pipe, "distill.teacher_nbest=3", "distill.teacher_beam=3",
                                    "distill.references=1"), progress=False)
    stages = record_of(pipe)["stages"]
    sources = read(pipe / "clean" / "train.en")
    kept = stages["clean"]["figures"]["kept"]
    assert stages["teacher"]["figures"]["nbest"] == 3 and len(read(pipe / "teacher" / "train.de")) == 3 * kept
    # a chunk file: 3 lines per source, source by source, each source's best first (nmt translate's n-best)
    model = Translator.load(DEMO_MODEL)
    found = model.translate_chunk(sources[:40], decode=model.decode_with(beam=3, nbest=3))
    assert read(pipe / "teacher" / "chunks" / "000000.de") == [t for r in found for t in r.text]

    data = stages["data"]["figures"]
    assert data["teacher_pairs"] == kept and data["nbest_pairs"] + data["nbest_repeats"] == 2 * kept
    assert data["nbest_pairs"] > kept  # most sources have 3 different translations
    assert data["reference_pairs"] + data["references_as_teacher"] == kept  # references=1: each one once
    pairs = list(zip(read(pipe / "distilled" / "train.en"), read(pipe / "distilled" / "train.de")))
    assert len(pairs) == kept + data["nbest_pairs"] + data["reference_pairs"]
    hyps = read(pipe / "teacher" / "train.de")
    for k in (0, 7, kept - 1):  # each source with its distinct translations
        assert {t for s, t in pairs if s == sources[k]} >= {h for h in hyps[3 * k:3 * k + 3] if h}
    assert f"{data['nbest_pairs']:,} more n-best" in figures_line("data", data)
    shown = data_section(record_of(pipe))  # the report's training data table
    assert f"<td>the teacher&#x27;s other n-best translations</td><td class=\"n\">{data['nbest_pairs']:,}</td>" \
        in shown


def test_a_beam_below_the_nbest_is_one_line(raw, tmp_path):
    pipe = tmp_path / "pipe"
    with pytest.raises(ConfigError) as e:  # the demo model searches with beam 4
        pipeline.run(distill_config(raw, pipe, "distill.teacher_nbest=5"), progress=False)
    assert str(e.value) == "distill.teacher_nbest 5 needs a beam of at least 5, but the teacher searches with beam " \
                           "4: set distill.teacher_beam"
    assert not pipe.exists()  # refused before any stage
    with pytest.raises(ConfigError, match="distill.teacher_beam 4 is below distill.teacher_nbest 5"):
        distill_config(raw, pipe, "distill.teacher_nbest=5", "distill.teacher_beam=4")


def test_sampled_outputs_differ_from_the_beam_and_repeat_for_a_seed_across_a_kill(raw, tmp_path, monkeypatch):
    stop_at(monkeypatch, "backtranslate")  # after the teacher
    for name, extra in (("beam", ()), ("whole", SAMPLED), ("other", (*SAMPLED, "distill.seed=2"))):
        with pytest.raises(Killed):
            pipeline.run(distill_config(raw, tmp_path / name, *extra), progress=False)
    output = {name: read(tmp_path / name / "teacher" / "train.de") for name in ("beam", "whole", "other")}
    assert record_of(tmp_path / "whole")["stages"]["teacher"]["figures"]["sampled"] is True
    first = output["whole"][::2]  # each source's better sample
    assert len(first) == len(output["beam"]) and sum(a != b for a, b in zip(first, output["beam"])) > len(first) / 10
    assert output["other"] != output["whole"]  # another seed, other samples

    real, calls = Translator.translate_chunk, []

    def dies_after_one_chunk(self, lines, **kwargs):
        if calls:
            raise Killed
        calls.append(1)
        return real(self, lines, **kwargs)

    monkeypatch.setattr(Translator, "translate_chunk", dies_after_one_chunk)
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, tmp_path / "pipe", *SAMPLED), progress=False)
    monkeypatch.setattr(Translator, "translate_chunk", real)
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, tmp_path / "pipe", *SAMPLED), progress=False)
    assert record_of(tmp_path / "pipe")["stages"]["teacher"]["figures"]["chunks_resumed"] == 1
    assert read(tmp_path / "pipe" / "teacher" / "train.de") == output["whole"]

    # the seed picks the samples: another one redoes the teacher (with beam search only the references share)
    with pytest.raises(NmtError, match=r"\(distill.seed: 1 vs 2\); use --force to redo it from the teacher stage"):
        pipeline.run(distill_config(raw, tmp_path / "whole", *SAMPLED, "distill.seed=2"), progress=False)
    with pytest.raises(NmtError, match=r"\(distill.seed: 1 vs 2\); use --force to redo it from the data stage"):
        pipeline.run(distill_config(raw, tmp_path / "beam", "distill.seed=2"), progress=False)


def test_a_pipeline_dir_from_before_these_keys_goes_on(raw, tmp_path, monkeypatch):
    stop_at(monkeypatch, "data")
    pipe = tmp_path / "pipe"
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, pipe), progress=False)
    record = record_of(pipe)
    new = ("teacher_nbest", "teacher_sampling", "teacher_sampling_topk", "teacher_sampling_topp",
           "teacher_sampling_temperature", "monolingual", "reverse_teacher")
    for key in new:
        del record["settings"]["distill"][key]
    del record["stages"]["backtranslate"]
    (pipe / "pipeline.json").write_text(json.dumps(record))
    with pytest.raises(NmtError, match=r"\(distill.teacher_nbest: None vs 2\); use --force to redo it from the "
                                       r"teacher stage"):
        pipeline.run(distill_config(raw, pipe, "distill.teacher_nbest=2"), progress=False)
    with pytest.raises(Killed):  # at their defaults the new keys change nothing: taken, the teacher kept
        pipeline.run(distill_config(raw, pipe), progress=False)
    record = record_of(pipe)
    assert record["stages"]["teacher"]["state"] == "done" and record["settings"]["distill"]["teacher_nbest"] == 1
    assert record["stages"]["backtranslate"]["figures"] == {"skipped": "no distill.monolingual"}
