"""The report of `nmt distill` (nmt.distill.report, nmt.distill.page), over one pipeline with its speed measured on
a few lines: its BLEU and chrF are what `nmt score` computes on the files the pipeline wrote (with the command lines
the page gives), its tokens/s are the tokens the systems generate (output_tokens, as the benches count them) over
the measured seconds, report.html is one self-contained page that escapes the corpus' text, the terminal shows the
same systems table, and the report stage resumes after a kill. With distill.comet (a tiny COMET model made by
unbabel-comet: tests/core/test_comet.py) the score stage adds each system's COMET, the page and the terminal a COMET
column, and the page's `nmt score --comet` commands give the same numbers; without it there is no COMET column."""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from rich.console import Console

from nmt.comet import Comet
from nmt.distill import pipeline, report
from nmt.distill.page import system_rows
from nmt.distill.state import STAGES, SYSTEMS
from nmt.errors import NmtError
from nmt.search import Hypothesis, generated_tokens
from nmt.translation.translator import output_tokens
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.distilling import Killed, distill_config, distill_overrides
from tests.helpers.paths import COMET_MODELS

# the speed measured on 4 test lines in one batch and 2 one at a time, one timed round; the student's outputs cut at
# 8 tokens (a student of 8 updates rarely stops by itself) and no language identification: seconds, not minutes
SPEED = ("distill.speed_rounds=1", "distill.speed_lines=4", "distill.speed_lines_single=2", "decode.max_len_a=0",
         "decode.max_len_b=8", "distill.langid_min_prob=0")
MARKUP = "<script>alert('x')</script> & <b>bold</b>"  # a corpus pair the copy filter drops


class Finished(NamedTuple):
    pipe: Path
    record: dict[str, Any]
    raw: dict[str, str]  # the corpus prefixes it was made of
    measured: dict[str, Any]  # what the speed measurement ran: systems (Translators), outputs and seconds per run


@pytest.fixture(scope="module")
def finished(raw, tmp_path_factory) -> Finished:
    """One finished pipeline over the demo corpus plus the markup pair (source = target)."""
    folder = tmp_path_factory.mktemp("report")
    train = folder / "train"
    for lang in ("en", "de"):
        text = Path(f"{raw['train']}.{lang}").read_text(encoding="utf-8")
        Path(f"{train}.{lang}").write_text(text + MARKUP + "\n", encoding="utf-8")
    corpus = {**raw, "train": str(train)}
    measured: dict[str, Any] = {}
    measure, turns = report.measure_speed, report.take_turns

    def measuring(systems, sources, d):
        measured["systems"] = systems
        return measure(systems, sources, d)

    def taking_turns(runs, rounds):
        measured["seconds"], measured["outputs"] = result = turns(runs, rounds)
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report, "measure_speed", measuring)
        patch.setattr(report, "take_turns", taking_turns)
        record = pipeline.run(distill_config(corpus, folder / "pipe", *SPEED), progress=False)
    return Finished(folder / "pipe", record, corpus, measured)


def table_rows(page: str, section: str) -> dict[str, list[str]]:
    """The table rows of the page's section `section` (its <h2>) by their first cell, unescaped."""
    text = page.split(f"<h2>{section}</h2>")[1].split("<h2>")[0]
    rows = [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)] for row in re.findall(
        r"<tr>(.*?)</tr>", text)]
    return {row[0]: row for row in rows if row}


def test_the_reports_scores_are_what_nmt_score_computes(finished):
    page = (finished.pipe / "report.html").read_text(encoding="utf-8")
    scores = finished.record["stages"]["score"]["figures"]
    pre = html.unescape(re.search(r"<pre>(.*?)</pre>", page, re.S).group(1))
    commands = dict((label, args) for args, label in re.findall(r"^nmt score (.*?)  # (.*)$", pre, re.M))
    names = {label: name for name, label in SYSTEMS.items()}
    assert sorted(commands) == sorted(SYSTEMS[n] for n in ("teacher", "student", "student_int8"))
    rows = table_rows(page, "Systems")
    for label, args in commands.items():
        result = run_cli("score", *shlex.split(args), "--json")
        assert result.exit_code == 0, result.stderr
        computed = json.loads(result.stdout)
        bleu, chrf = (round(computed[m]["score"], 2) for m in ("bleu", "chrf"))
        assert (scores[names[label]]["bleu"], scores[names[label]]["chrf"]) == (bleu, chrf)
        assert rows[label][1:3] == [f"{bleu:.2f}", f"{chrf:.2f}"]  # the page shows those numbers


def test_the_tokens_counted_are_each_best_hypothesis_without_eos():
    best, other = Hypothesis([7, 8, 9], -1.0, -2.0), Hypothesis([7], -3.0, -3.0)  # tokens exclude BOS and EOS
    assert generated_tokens([[best, other], [], [other]]) == 3 + 0 + 1  # an empty line: no hypothesis, 0


def test_tokens_per_second_are_the_generated_tokens_over_the_seconds(finished):
    figures = finished.record["stages"]["report"]["figures"]
    assert {k: v for k, v in figures["speed"].items() if k != "threads"} == {
        "rounds": 1, "batch": 32, "lines": 4, "lines_single": 2}
    sources = Path(finished.raw["test"] + ".en").read_text(encoding="utf-8").splitlines()
    systems, outputs, seconds = (finished.measured[k] for k in ("systems", "outputs", "seconds"))
    assert sorted(systems) == ["student", "student_int8", "teacher"]  # every model (the fine-tune was skipped)
    assert figures["student_int8"]["device"] == "cpu" and figures["student_int8"]["quantize"] == "int8"
    for name, translator in systems.items():
        system = figures[name]
        assert (system["beam"], system["device"]) == (translator.decode.beam, str(translator.device))
        assert system["weight_bytes"] > 0 and system["checkpoint_bytes"] >= system["weight_bytes"]
        for key, lines in (("batch32", sources[:4]), ("batch1", sources[:2])):
            measured, out = system[key], outputs[name, key]
            assert [r.source for r in out] == lines and measured["lines"] == len(lines)
            # the tokens: each line's best hypothesis, EOS not counted, as the benches count them
            assert measured["tokens"] == output_tokens(out) == sum(len(r.hypotheses[0].tokens) for r in out) > 0
            assert len(seconds[name, key]) == 1 and measured["seconds"] == round(seconds[name, key][0], 6) > 0
            assert measured["tokens_per_s"] == round(measured["tokens"] / seconds[name, key][0], 1) > 0


def test_the_page_is_self_contained_and_escapes_the_corpus(finished):
    page = (finished.pipe / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page.lower()  # no script of its own, and the corpus' one is text
    assert html.escape(MARKUP) in page
    assert not re.search(r"""(src|href)\s*=|https?://|<link|@import|url\(""", page, re.I)  # nothing from elsewhere
    for heading in ("Systems", "Gaps", "Cleaning", "Stages", "Check the numbers"):
        assert f"<h2>{heading}</h2>" in page
    assert "COMET" not in page  # none was asked for
    clean = json.loads((finished.pipe / "clean" / "report.json").read_text(encoding="utf-8"))
    assert clean["samples"]["copy"][0]["src"] == MARKUP
    rows = table_rows(page, "Cleaning")
    assert rows["copy"] == ["copy", "1"] and rows[str(clean["samples"]["copy"][0]["line"])][1:3] == [MARKUP, MARKUP]
    stages = table_rows(page, "Stages")
    assert all(stages[stage][1] == "done" for stage in STAGES if stage != "report")
    scores, figures = (finished.record["stages"][s]["figures"] for s in ("score", "report"))
    gap = scores["student"]["bleu"] - scores["teacher"]["bleu"]
    assert f"student - teacher: BLEU {round(gap, 2) + 0.0:+.2f}" in html.unescape(page)
    console = Console(record=True, width=200)  # the terminal's table: the page's rows
    console.print(report.systems_table(finished.record))
    shown = console.export_text()
    for row in system_rows(scores, figures):
        assert re.search(r"\s*│\s*".join(re.escape(cell) for cell in row), shown), row


def test_the_report_stage_resumes_after_a_kill(finished, tmp_path, monkeypatch):
    pipe = tmp_path / "pipe"
    shutil.copytree(finished.pipe, pipe)
    record = json.loads((pipe / "pipeline.json").read_text())
    del record["stages"]["report"]  # a pipeline dir from before the report: no report stage, no speed keys
    for key in ("speed_rounds", "speed_lines", "speed_lines_single"):
        del record["settings"]["distill"][key]
    (pipe / "pipeline.json").write_text(json.dumps(record))
    (pipe / "report.html").unlink()
    monkeypatch.setattr(report, "translators", lambda *a: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):  # the new keys are taken without --force: nothing made with them is there
        pipeline.run(distill_config(finished.raw, pipe, *SPEED), progress=False)
    record = json.loads((pipe / "pipeline.json").read_text())
    assert record["stages"]["report"]["state"] == "running" and record["settings"]["distill"]["speed_lines"] == 4
    assert not (pipe / "report.html").exists()
    monkeypatch.undo()
    ran = []
    for name, runner in list(pipeline.RUNNERS.items()):
        monkeypatch.setitem(pipeline.RUNNERS, name, lambda *a, _n=name, _r=runner: ran.append(_n) or _r(*a))
    done = pipeline.run(distill_config(finished.raw, pipe, *SPEED), progress=False)
    assert ran == ["report"] and done["stages"]["report"]["resumed"] is True
    assert (pipe / "report.html").is_file() and done["stages"]["report"]["figures"]["student"]["batch1"]["tokens"]
    with pytest.raises(NmtError, match=r"\(distill.speed_lines: 4 vs 8\); use --force to redo it from the report "):
        pipeline.run(distill_config(finished.raw, pipe, *SPEED, "distill.speed_lines=8"), progress=False)


def test_comet_joins_the_scores_and_the_report(finished, tmp_path):
    pipe = tmp_path / "pipe"
    shutil.copytree(finished.pipe, pipe)
    model = COMET_MODELS / "tiny-da"
    with_comet = distill_config(finished.raw, pipe, *SPEED, f"distill.comet={model}")
    with pytest.raises(NmtError, match=r"\(distill.comet: None vs .*use --force to redo it from the score stage"):
        pipeline.run(with_comet, progress=False)
    record = pipeline.run(with_comet, force=True, progress=False)
    scores = record["stages"]["score"]["figures"]
    assert scores["comet"]["model"] == str(model) and scores["comet"]["signature"].startswith("model:tiny-da|")
    names = [name for name in SYSTEMS if name in scores]
    sources = (pipe / "score" / "test.src.en").read_text(encoding="utf-8").splitlines()
    refs = (pipe / "score" / "test.ref.de").read_text(encoding="utf-8").splitlines()
    outputs = {n: (pipe / "score" / f"test.{n}.de").read_text(encoding="utf-8").splitlines() for n in names}
    alone = {n: Comet(model).score_systems(sources, {n: lines}, refs)[n] for n, lines in outputs.items()}
    assert {n: scores[n]["comet"] for n in names} == {n: round(sum(s) / len(s), 4) for n, s in alone.items()}
    page = (pipe / "report.html").read_text(encoding="utf-8")
    rows = table_rows(page, "Systems")
    assert [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", page.split("<h2>Systems</h2>")[1])[:5]] == [
        "system", "BLEU", "chrF", "COMET", "tokens/s b32"]
    pre = html.unescape(re.search(r"<pre>(.*?)</pre>", page, re.S).group(1))
    for args, label in re.findall(r"^nmt score (.*?)  # (.*)$", pre, re.M):
        name = {v: k for k, v in SYSTEMS.items()}[label]
        assert rows[label][3] == f"{scores[name]['comet']:.4f}"
        computed = json.loads(run_cli("score", *shlex.split(args), "--json").stdout)["comet"]["score"]
        assert computed == pytest.approx(scores[name]["comet"], abs=1e-4)
    gap = round(scores["student"]["comet"] - scores["teacher"]["comet"], 4) + 0.0
    assert f"COMET {gap:+.4f}" in html.unescape(page)
    console = Console(record=True, width=200)
    console.print(report.systems_table(record))
    shown = console.export_text()
    assert "COMET" in shown and f"{scores['student']['comet']:.4f}" in shown
    assert f"COMET {scores['student']['comet']:.4f}" in run_cli("info", pipe).stdout


def test_a_wrong_comet_dir_is_refused_before_any_stage(raw, tmp_path):
    pipe = tmp_path / "pipe"
    with pytest.raises(NmtError, match="no hparams.yaml in it"):
        pipeline.run(distill_config(raw, pipe, f"distill.comet={tmp_path}"), progress=False)
    assert not pipe.exists()
    sets = [arg for value in distill_overrides(raw, pipe) for arg in ("--set", value)]
    assert_one_line_error(run_cli("distill", *sets, "--comet", tmp_path / "nowhere"),
                          f"COMET model {tmp_path / 'nowhere'}: no such directory")
    assert not pipe.exists()
