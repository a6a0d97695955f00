"""`nmt distill` end to end on a tiny corpus: the chain through the command line and `nmt info`, a teacher given as
a file of translations or imported from Marian, resuming after a kill between stages, inside the teacher's
translation (the finished chunks are not redone) and inside the student's training (at the checkpoint's update) with
an uninterrupted run's result, a full disk, --force redoing only what changed, and the one-line errors of bad
input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nmt.config.experiment import load_config
from nmt.distill import pipeline
from nmt.distill.state import STAGES
from nmt.errors import NmtError
from nmt.rundir import read_metrics
from nmt.score import score
from nmt.train.loop import Trainer
from nmt.translation.translator import Translator
from tests.helpers.cli import run_cli
from tests.helpers.distilling import Killed, distill_config, distill_overrides, read, stop_at
from tests.helpers.paths import DEMO_MODEL, MARIAN_MODEL


def test_the_chain_through_the_command_line(raw, tmp_path):
    pipe = tmp_path / "pipe"
    sets = [a for o in distill_overrides(raw, pipe) for a in ("--set", o)]
    result = run_cli("distill", *sets)
    assert result.exit_code == 0, result.stderr
    record = json.loads((pipe / "pipeline.json").read_text())
    assert [record["stages"][s]["state"] for s in STAGES] == ["done"] * len(STAGES)
    figures = {s: record["stages"][s]["figures"] for s in STAGES}
    assert figures["clean"]["read"] == 120 and figures["teacher"]["lines"] == figures["clean"]["kept"]
    assert figures["teacher"]["chunks"] == -(-figures["clean"]["kept"] // 40)
    assert figures["student"]["updates"] == 8
    # the scores are nmt score's on the files the stage wrote
    refs = read(Path(raw["test"] + ".de"))
    for who in ("teacher", "student"):
        hyps = read(pipe / "score" / f"test.{who}.de")
        assert len(hyps) == 20
        assert figures["score"][who]["bleu"] == round(score(hyps, [refs], metrics=("bleu",))["bleu"]["score"], 2)
    assert figures["score"]["teacher"]["parameters"] > figures["score"]["student"]["parameters"]
    assert "student - teacher: BLEU" in result.stderr and f"report: {pipe / 'report.html'}" in result.stderr

    info = run_cli("info", pipe)
    assert info.exit_code == 0 and all(s in info.stdout for s in STAGES) and "teacher: BLEU" in info.stdout
    described = json.loads(run_cli("info", pipe, "--json").stdout)
    assert described["type"] == "pipeline" and described["stages"]["score"]["figures"] == figures["score"]

    again = run_cli("distill", *sets)  # a finished pipeline: every stage skipped
    assert again.exit_code == 0 and again.stderr.count("done by an earlier run") == len(STAGES)


def test_a_teacher_given_as_a_file_of_translations(raw, tmp_path):
    corpus = read(Path(raw["train"] + ".de"))
    given = tmp_path / "llm.de"  # "another system": the references, upper-cased
    given.write_text("".join(line.upper() + "\n" for line in corpus), encoding="utf-8")
    test_given = tmp_path / "llm-test.de"
    test_refs = read(Path(raw["test"] + ".de"))
    test_given.write_text("".join(line.upper() + "\n" for line in test_refs), encoding="utf-8")
    cfg = distill_config(raw, tmp_path / "pipe", "distill.teacher=null", f"distill.teacher_translations={given}",
                         f"distill.teacher_test_translations={test_given}")
    record = pipeline.run(cfg, progress=False)
    kept = [int(n) for n in read(tmp_path / "pipe" / "clean" / "lines.txt")]
    assert read(tmp_path / "pipe" / "teacher" / "train.de") == [corpus[n - 1].upper() for n in kept]
    assert read(tmp_path / "pipe" / "distilled" / "train.de") == [corpus[n - 1].upper() for n in kept]
    teacher = record["stages"]["score"]["figures"]["teacher"]
    expected = score([line.upper() for line in test_refs], [test_refs], metrics=("bleu",))["bleu"]["score"]
    assert teacher["bleu"] == round(expected, 2)


def test_wrong_line_count_of_a_translations_file(raw, tmp_path):
    given = tmp_path / "short.de"
    given.write_text("eins\nzwei\n", encoding="utf-8")
    cfg = distill_config(raw, tmp_path / "pipe", "distill.teacher=null", f"distill.teacher_translations={given}")
    with pytest.raises(NmtError, match=r"short.de has 2 lines but the corpus data.train .* has 120: it must hold"):
        pipeline.run(cfg, progress=False)
    assert not (tmp_path / "pipe").exists()  # refused before any stage


def test_references_are_mixed_in_the_stated_share(raw, tmp_path):
    record = pipeline.run(distill_config(raw, tmp_path / "pipe", "distill.references=0.5"), progress=False)
    data = record["stages"]["data"]["figures"]
    kept = record["stages"]["clean"]["figures"]["kept"]
    picked = data["reference_pairs"] + data["references_as_teacher"]  # a reference equal to the teacher's: once
    assert data["teacher_pairs"] == kept and 0.35 * kept < picked < 0.65 * kept
    refs, hyps = (read(tmp_path / "pipe" / f) for f in ("clean/train.de", "teacher/train.de"))
    assert data["reference_pairs"] <= sum(r != h for r, h in zip(refs, hyps))
    assert len(read(tmp_path / "pipe" / "distilled" / "train.en")) == kept + data["reference_pairs"]


def test_a_kill_between_stages_resumes_at_the_unfinished_stage(raw, tmp_path, monkeypatch):
    cfg = distill_config(raw, tmp_path / "pipe")

    def killed(*args):
        raise Killed

    monkeypatch.setitem(pipeline.RUNNERS, "data", killed)
    with pytest.raises(Killed):
        pipeline.run(cfg, progress=False)
    record = json.loads((tmp_path / "pipe" / "pipeline.json").read_text())
    killed = STAGES.index("data")
    assert [record["stages"][s]["state"] for s in STAGES] == \
        ["done"] * killed + ["running"] + ["pending"] * (len(STAGES) - killed - 1)
    monkeypatch.undo()
    ran = []
    for name, runner in list(pipeline.RUNNERS.items()):
        monkeypatch.setitem(pipeline.RUNNERS, name, lambda *a, _n=name, _r=runner: ran.append(_n) or _r(*a))
    record = pipeline.run(load_config(None, distill_overrides(raw, tmp_path / "pipe")), progress=False)
    assert ran == ["data", "student", "student-int8", "score", "export", "report"]
    assert record["stages"]["data"]["resumed"] is True and record["stages"]["student"]["resumed"] is False


def test_kills_inside_the_teacher_and_the_training_resume_where_they_stopped(raw, tmp_path, monkeypatch):
    whole = pipeline.run(distill_config(raw, tmp_path / "whole"), progress=False)
    real = Translator.translate_chunk
    calls = []

    def dies_after_one_chunk(self, lines, **kwargs):
        if calls:
            raise Killed
        calls.append(len(lines))
        return real(self, lines, **kwargs)

    monkeypatch.setattr(Translator, "translate_chunk", dies_after_one_chunk)
    cfg = distill_config(raw, tmp_path / "pipe")
    with pytest.raises(Killed):
        pipeline.run(cfg, progress=False)
    record = json.loads((tmp_path / "pipe" / "pipeline.json").read_text())
    assert record["stages"]["teacher"]["state"] == "running"
    assert record["stages"]["teacher"]["figures"]["chunks_done"] == 1
    chunks = sorted((tmp_path / "pipe" / "teacher" / "chunks").iterdir())
    assert [c.name for c in chunks] == ["000000.de"]  # no half-written second chunk either
    first = chunks[0].stat()

    translated: list[int] = []

    def counting(self, lines, **kwargs):
        translated.append(len(lines))
        return real(self, lines, **kwargs)

    monkeypatch.setattr(Translator, "translate_chunk", counting)
    real_update = Trainer.update

    def dies_at_update_6(self, group):  # after the checkpoint of update 4 (train.save_every=4)
        if self.counters.step + len(self.late.queued) == 5:  # updates before it, read late or not (nmt.train.late)
            raise Killed
        return real_update(self, group)

    monkeypatch.setattr(Trainer, "update", dies_at_update_6)
    with pytest.raises(Killed):  # killed again, inside the student's training this time
        pipeline.run(distill_config(raw, tmp_path / "pipe"), progress=False)
    updates = []
    monkeypatch.setattr(Trainer, "update", lambda self, group: updates.append(1) or real_update(self, group))
    resumed = pipeline.run(distill_config(raw, tmp_path / "pipe"), progress=False)
    assert resumed["stages"]["student"]["resumed"] is True
    assert len(updates) == 4  # updates 5 to 8: from the checkpoint of update 4
    steps = [r["step"] for r in read_metrics(tmp_path / "pipe" / "student" / "metrics.jsonl") if r["type"] == "train"]
    assert steps == [4, 8]
    n_chunks = whole["stages"]["teacher"]["figures"]["chunks"]
    assert len(translated) == n_chunks - 1 + 3  # the other chunks, then the test set: teacher, student, its int8
    assert (chunks[0].stat().st_ino, chunks[0].stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    assert resumed["stages"]["teacher"]["figures"]["chunks_resumed"] == 1
    for name in ("teacher/train.de", "distilled/train.de", "score/test.student.de"):
        assert read(tmp_path / "pipe" / name) == read(tmp_path / "whole" / name), name
    assert resumed["stages"]["score"]["figures"]["student"]["bleu"] == \
        whole["stages"]["score"]["figures"]["student"]["bleu"]


def test_a_teacher_of_another_language_pair(raw, tmp_path):
    cfg = distill_config(raw, tmp_path / "pipe", "data.src_lang=de", "data.tgt_lang=en")
    with pytest.raises(NmtError, match=r"translates en->de but the corpus is de->en \(data.src_lang/data.tgt_lang\)"):
        pipeline.run(cfg, progress=False)


def test_no_teacher_and_no_corpus(raw, tmp_path):
    with pytest.raises(NmtError, match="no teacher: set distill.teacher"):
        pipeline.run(distill_config(raw, tmp_path / "pipe", "distill.teacher=null"), progress=False)
    with pytest.raises(NmtError, match="no corpus: data.train is not set"):
        pipeline.run(distill_config(raw, tmp_path / "pipe", "data.train=null"), progress=False)


def test_a_student_larger_than_the_teacher_is_warned(raw, tmp_path, capsys):
    pipeline.preflight(distill_config(raw, tmp_path / "pipe", "model.d_model=128", "model.d_ff=512"))
    assert "warning: the student" in capsys.readouterr().err
    pipeline.preflight(distill_config(raw, tmp_path / "pipe"))
    assert "warning" not in capsys.readouterr().err


def test_other_settings_in_the_same_pipeline_dir_are_refused_then_forced(raw, tmp_path, monkeypatch):
    stop_at(monkeypatch, "teacher")
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, tmp_path / "pipe"), progress=False)
    other = distill_config(raw, tmp_path / "pipe", "distill.copies=false")
    with pytest.raises(NmtError, match=r"was made with other settings \(distill.copies: True vs False\); use --force "
                                       r"to redo it from the clean stage on"):
        pipeline.run(other, progress=False)
    with pytest.raises(Killed):  # --force: clean redone with the new settings
        pipeline.run(other, force=True, progress=False)
    record = json.loads((tmp_path / "pipe" / "pipeline.json").read_text())
    assert record["settings"]["distill"]["copies"] is False and record["stages"]["clean"]["state"] == "done"


def test_a_new_student_keeps_the_teachers_translations(raw, tmp_path, monkeypatch):
    stop_at(monkeypatch, "student")
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, tmp_path / "pipe"), progress=False)
    teacher_output = (tmp_path / "pipe" / "teacher" / "train.de").stat()
    ran = []
    for name in STAGES:
        monkeypatch.setitem(pipeline.RUNNERS, name, lambda *a, _n=name: ran.append(_n) or {})
    deeper = distill_config(raw, tmp_path / "pipe", "model.encoder_layers=3")
    with pytest.raises(NmtError, match=r"\(model.encoder_layers: 2 vs 3\); use --force to redo it from the student"):
        pipeline.run(deeper, progress=False)
    pipeline.run(deeper, force=True, progress=False)
    assert ran == ["student", "student-int8", "score", "export", "report"]
    assert (tmp_path / "pipe" / "teacher" / "train.de").stat().st_mtime_ns == teacher_output.st_mtime_ns


def test_bad_input_is_one_error_line_on_the_command_line(raw, tmp_path):
    sets = [a for o in distill_overrides(raw, tmp_path / "pipe", "data.tgt_lang=fr") for a in ("--set", o)]
    result = run_cli("distill", *sets)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: the teacher {DEMO_MODEL} translates en->de but the corpus is en->fr (data.src_lang/data.tgt_lang)"]


def test_an_imported_marian_teacher_translates_as_nmt_translate_does(raw, tmp_path, monkeypatch):
    from nmt.interop.marian import import_model

    imported = tmp_path / "marian.pt"
    import_model(str(MARIAN_MODEL), imported)
    stop_at(monkeypatch, "data")
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, tmp_path / "pipe", f"distill.teacher={imported}"), progress=False)
    sources = read(tmp_path / "pipe" / "clean" / "train.en")
    expected = [r.text[0] for r in Translator.load(imported).translate_chunk(sources)]  # its own search settings
    assert read(tmp_path / "pipe" / "teacher" / "train.de") == expected


def test_a_full_disk_inside_the_teacher_is_one_line_and_loses_nothing(raw, tmp_path, monkeypatch):
    from nmt.distill import teacher
    from nmt.io import atomic_write

    real = teacher.atomic_write_text

    def disk_full_at_the_second_chunk(path, text):
        if Path(path).name != "000001.de":
            return real(path, text)

        def write(f):
            f.write(text[:10].encode())  # part of the chunk reached the disk, then it was full
            raise OSError(28, "No space left on device")

        return atomic_write(path, write)

    monkeypatch.setattr(teacher, "atomic_write_text", disk_full_at_the_second_chunk)
    pipe = tmp_path / "pipe"
    sets = [a for o in distill_overrides(raw, pipe) for a in ("--set", o)]
    result = run_cli("distill", *sets)
    assert result.exit_code == 1
    chunks = pipe / "teacher" / "chunks"
    assert result.stderr.strip().splitlines()[-1] == \
        f"error: no space left on device while writing {chunks / '000001.de'}; previous files are intact"
    assert sorted(p.name for p in chunks.iterdir()) == ["000000.de"]  # no half chunk, no temp file
    monkeypatch.undo()  # space again: the rerun goes on at the second chunk
    stop_at(monkeypatch, "data")
    with pytest.raises(Killed):
        pipeline.run(distill_config(raw, pipe), progress=False)
    record = json.loads((pipe / "pipeline.json").read_text())
    assert record["stages"]["teacher"]["figures"]["chunks_resumed"] == 1
    assert len(read(pipe / "teacher" / "train.de")) == record["stages"]["clean"]["figures"]["kept"]


def test_two_runs_in_one_pipeline_dir(raw, tmp_path):
    from nmt.distill.pipeline import settings
    from nmt.distill.state import Pipeline

    cfg = distill_config(raw, tmp_path / "pipe")
    first = Pipeline(cfg.distill.dir, settings(cfg))
    try:
        with pytest.raises(NmtError, match=r"pipeline dir .*pipe is in use by another `nmt distill` \(pid \d+\)"):
            pipeline.run(cfg, progress=False)
    finally:
        first.release()
