"""The export stage of `nmt distill` (nmt.distill.packages) over one tiny pipeline exporting ct2, argos and hf: the
packages are `nmt export`'s of the final student (ct2 and argos int8, hf float32), the ct2 package translates the
test set as its own README's CTranslate2 call does and its BLEU and chrF are nmt score's of that output, report.html,
the terminal and `nmt info` show the packages; `export: []` is recorded as skipped, a missing library is a note (not
a crash), and the stage is redone whole after a kill and runs in a pipeline dir made before it existed."""

from __future__ import annotations

import html
import json
import re
import shutil
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
from rich.console import Console

from nmt.distill import packages, pipeline, report
from nmt.distill.page import megabytes, package_rows
from nmt.distill.state import INT8_STAGE, STAGES
from nmt.interop.export import export
from nmt.rundir import RunDir
from nmt.score import score
from tests.helpers.cli import run_cli
from tests.helpers.distilling import Killed, distill_config, read

ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")

# every target; the student's outputs cut at 8 tokens (a student of 8 updates rarely stops by itself: the same limit
# for every line, which the package README's one max_decoding_length per call gives too); no language identification
SETTINGS = ("distill.export=ct2,argos,hf", "decode.max_len_a=0", "decode.max_len_b=8", "distill.langid_min_prob=0")


class Exported(NamedTuple):
    pipe: Path
    record: dict[str, Any]
    raw: dict[str, str]


@pytest.fixture(scope="module")
def exported(raw, tmp_path_factory) -> Exported:
    pipe = tmp_path_factory.mktemp("export") / "pipe"
    return Exported(pipe, pipeline.run(distill_config(raw, pipe, *SETTINGS), progress=False), raw)


def copy(exported: Exported, folder: Path) -> Path:
    shutil.copytree(exported.pipe, folder / "pipe")
    return folder / "pipe"


def recording(monkeypatch) -> list[str]:
    """The names of the stages that run from now on, in order."""
    ran: list[str] = []
    for name, runner in list(pipeline.RUNNERS.items()):
        monkeypatch.setitem(pipeline.RUNNERS, name, lambda *a, _n=name, _r=runner: ran.append(_n) or _r(*a))
    return ran


def size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_the_packages_are_nmt_exports_of_the_final_student(exported, tmp_path):
    figures = exported.record["stages"]["export"]["figures"]
    student = RunDir(exported.pipe / "student").for_translation()  # no int8-aware fine-tune: the student's
    assert figures["from"] == str(student) and figures["system"] == "student_int8"
    found = figures["packages"]
    assert list(found) == ["ct2", "argos", "hf"]
    assert [found[t]["precision"] for t in found] == ["int8", "int8", "fp32"]
    assert [found[t]["path"] for t in found] == ["export/ct2", "export/argos/en_de.argosmodel", "export/hf"]
    for target, package in found.items():
        assert package["bytes"] == size(exported.pipe / package["path"]) > 0, target
    ct2_dir = exported.pipe / "export" / "ct2"
    assert (ct2_dir / "model.bin").is_file() and "weights int8" in (ct2_dir / "README.md").read_text()
    fp32 = export(student, "ct2", tmp_path / "fp32")  # int8 weights: far fewer bytes than float32's
    assert (ct2_dir / "model.bin").stat().st_size < 0.5 * (fp32 / "model.bin").stat().st_size
    with zipfile.ZipFile(exported.pipe / found["argos"]["path"]) as zf:
        names = zf.namelist()
    assert any(n.endswith("/metadata.json") for n in names) and any(n.endswith("/model/model.bin") for n in names)
    assert (exported.pipe / "export" / "hf" / "model.safetensors").is_file()
    assert not [p for p in (exported.pipe / "export").rglob("*") if ".tmp" in p.name]  # nothing half-written left


def test_the_final_student_is_the_int8_aware_fine_tunes_when_it_ran(exported, tmp_path):
    pipe = copy(exported, tmp_path)
    shutil.copytree(pipe / "student", pipe / INT8_STAGE)  # stands for the fine-tune's run dir
    finished = SimpleNamespace(path=pipe, done=lambda name: True)
    tuned = distill_config(exported.raw, pipe, "distill.int8_finetune_updates=5")
    assert packages.final_student(tuned, finished) == (RunDir(pipe / INT8_STAGE).for_translation(),
                                                      "student_int8_tuned")
    assert packages.final_student(distill_config(exported.raw, pipe), finished) == \
        (RunDir(pipe / "student").for_translation(), "student_int8")  # int8_finetune_updates=0: the student


def test_the_ct2_package_translates_and_its_scores_are_nmt_scores(exported):
    ct2 = exported.record["stages"]["export"]["figures"]["packages"]["ct2"]
    output = read(exported.pipe / ct2["output"])
    sources, refs = read(Path(exported.raw["test"] + ".en")), read(Path(exported.raw["test"] + ".de"))
    assert ct2["output"] == "export/test.ct2.de" and ct2["lines"] == len(output) == len(refs) == 20
    result = score(output, [refs], metrics=("bleu", "chrf"))
    assert ct2["bleu"] == round(result["bleu"]["score"], 2) and ct2["chrf"] == round(result["chrf"]["score"], 2)
    # the output is the package's own: the Python call its README gives (CTranslate2, int8) translates alike
    directory = exported.pipe / "export" / "ct2"
    readme = (directory / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1).replace("THIS_DIRECTORY", str(directory))
    code = code.replace('lines = ["Hello world."]', f"lines = {sources!r}").replace("print(", "len(")
    assert 'compute_type="int8"' in code
    scope: dict[str, Any] = {}
    exec(code, scope)
    assert [scope["tgt"].decode(h) for h in scope["out"]] == output


def test_the_report_shows_the_packages(exported):
    pipe, record = exported.pipe, exported.record
    figures, scores = record["stages"]["export"]["figures"], record["stages"]["score"]["figures"]
    page = (pipe / "report.html").read_text(encoding="utf-8")
    section = page.split("<h2>Packages</h2>")[1].split("<h2>")[0]
    rows = {row[0]: row for row in package_rows(pipe, figures)}
    ct2 = figures["packages"]["ct2"]
    assert rows["ct2"] == ["ct2", "int8", megabytes(ct2["bytes"]), f"{ct2['bleu']:.2f}", f"{ct2['chrf']:.2f}",
                           str(pipe / "export" / "ct2")]
    assert rows["hf"][1:2] + rows["hf"][3:5] == ["fp32", "-", "-"]
    opening = ["<td>", "<td>", '<td class="n">', '<td class="n">', '<td class="n">', '<td class="text">']
    for row in rows.values():
        assert "".join(f"{o}{html.escape(c)}</td>" for o, c in zip(opening, row)) in section
    gap = round(ct2["bleu"] - scores["student"]["bleu"], 2) + 0.0
    assert f"CTranslate2 int8 package - student: BLEU {gap:+.2f}" in section
    assert "test.ct2.de" in section and "install_from_path" in section and "float32" in section
    console = Console(record=True, width=250)
    console.print(report.packages_table(pipe, record))
    shown = console.export_text()
    for row in rows.values():
        assert re.search(r"\s*│\s*".join(re.escape(cell) for cell in row), shown), row
    info = run_cli("info", pipe)
    assert info.exit_code == 0 and f"ct2 int8, {ct2['bytes'] / 1e6:,.2f} MB, BLEU {ct2['bleu']:.2f}" in info.stdout


def test_export_nothing_is_recorded_as_skipped(exported, tmp_path, monkeypatch):
    pipe = copy(exported, tmp_path)
    ran = recording(monkeypatch)
    record = pipeline.run(distill_config(exported.raw, pipe, *SETTINGS, "distill.export=[]"), force=True,
                          progress=False)
    assert ran == ["export", "report"]  # only the export and the report follow from distill.export
    assert record["stages"]["export"] == {**record["stages"]["export"], "state": "done",
                                          "figures": {"skipped": "distill.export=[]"}}
    assert not (pipe / "export").exists()
    assert "<h2>Packages</h2>\n<p>No packages: distill.export=[].</p>" in (pipe / "report.html").read_text()
    assert "skipped: distill.export=[]" in run_cli("info", pipe).stdout


def test_a_missing_library_is_a_note_not_a_crash(exported, tmp_path, monkeypatch, capsys):
    pipe = copy(exported, tmp_path)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` fails as if not installed
    record = pipeline.run(distill_config(exported.raw, pipe, *SETTINGS, "distill.export=ct2,hf"), force=True,
                          progress=False)
    found = record["stages"]["export"]["figures"]["packages"]
    note = (f"not exported: ctranslate2 is not installed (pip install 'nmt[export]'; then: nmt export --checkpoint "
            f"{record['stages']['export']['figures']['from']} --to ct2 -o {pipe / 'export' / 'ct2'} --quantization "
            "int8)")
    assert found["ct2"] == {"precision": "int8", "note": note} and "bytes" in found["hf"]
    assert record["stages"]["export"]["state"] == "done" and not (pipe / "export" / "ct2").exists()
    assert "".join(note.split()) in "".join(capsys.readouterr().err.split())  # said on the terminal (folded there)
    rows = {row[0]: row for row in package_rows(pipe, record["stages"]["export"]["figures"])}
    assert rows["ct2"] == ["ct2", "int8", "-", "-", "-", note]
    assert note.replace("'", "&#x27;") in (pipe / "report.html").read_text()


def test_the_stage_is_redone_whole_after_a_kill(exported, tmp_path, monkeypatch):
    pipe = copy(exported, tmp_path)
    monkeypatch.setattr(packages, "score_ct2", lambda *a: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):  # killed after the ct2 package was written, before it was scored
        pipeline.run(distill_config(exported.raw, pipe, *SETTINGS, "distill.export=ct2"), force=True, progress=False)
    record = json.loads((pipe / "pipeline.json").read_text())
    assert record["stages"]["export"]["state"] == "running" and (pipe / "export" / "ct2" / "model.bin").is_file()
    (pipe / "export" / ".ct2.half-written.tmp").mkdir()  # what a kill inside nmt export's rename would leave
    monkeypatch.undo()
    ran = recording(monkeypatch)
    record = pipeline.run(distill_config(exported.raw, pipe, *SETTINGS, "distill.export=ct2"), progress=False)
    assert ran == ["export", "report"] and record["stages"]["export"]["resumed"] is True
    assert sorted(p.name for p in (pipe / "export").iterdir()) == ["ct2", "test.ct2.de"]
    assert record["stages"]["export"]["figures"]["packages"]["ct2"]["bleu"] == \
        exported.record["stages"]["export"]["figures"]["packages"]["ct2"]["bleu"]


def test_a_pipeline_dir_from_before_the_stage_gets_its_packages(exported, tmp_path, monkeypatch):
    pipe = copy(exported, tmp_path)
    record = json.loads((pipe / "pipeline.json").read_text())
    del record["stages"]["export"], record["settings"]["distill"]["export"]
    (pipe / "pipeline.json").write_text(json.dumps(record))
    shutil.rmtree(pipe / "export")
    ran = recording(monkeypatch)
    done = pipeline.run(distill_config(exported.raw, pipe, *SETTINGS, "distill.export=ct2"), progress=False)
    assert ran == ["export", "report"]  # the new key taken without --force; the report redone to show the packages
    assert all(done["stages"][s]["state"] == "done" for s in STAGES)
    assert "<h2>Packages</h2>" in (pipe / "report.html").read_text() and (pipe / "export" / "ct2").is_dir()
