"""report.html of `nmt distill` (nmt.distill.report measures what it shows): one self-contained page, its style
inline, no script and nothing fetched from elsewhere, so that it opens anywhere and can be mailed as it is. Every
text that comes from the corpus, the config or the file system is HTML-escaped: a dropped pair may hold markup."""

from __future__ import annotations

import html
import json
import os
import platform
import shlex
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from nmt.distill.filters import FILTERS
from nmt.distill.state import STAGES, SYSTEMS

# (system, system it is compared with): the gaps the report states
GAPS = (("student", "teacher"), ("student_int8", "student"), ("student_int8_tuned", "student"))
COLUMNS = ("system", "BLEU", "chrF", "tokens/s b32", "tokens/s b1", "parameters", "weights", "checkpoint file")
PACKAGE_COLUMNS = ("package", "precision", "size", "BLEU", "chrF", "path")
COMET_COLUMN = 3  # where the COMET column goes when the score stage computed COMET (distill.comet)
STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; } th, td { padding: 0.25em 0.7em; border: 1px solid #ddd; }
th { background: #f4f4f4; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.text { max-width: 30em; overflow-wrap: anywhere; } .note { color: #555; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.7em; overflow-x: auto; }
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def table(header: list[str], rows: list[list[str]], numeric: Collection[int] = (), text: Collection[int] = ()
          ) -> str:
    """An HTML table of plain cells (escaped here); `numeric`/`text`: the columns aligned right / wrapped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    opening = ['<td class="n">' if i in numeric else '<td class="text">' if i in text else "<td>"
               for i in range(len(header))]
    body = "".join("<tr>" + "".join(f"{opening[i]}{esc(cell)}</td>" for i, cell in enumerate(row)) + "</tr>\n"
                   for row in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}</table>\n"


def megabytes(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.2f} MB"


def speed_cell(system: dict[str, Any], key: str) -> str:
    return f"{system[key]['tokens_per_s']:,.0f}" if key in system else "-"


def columns(scores: dict[str, Any]) -> list[str]:
    """The systems table's columns: COLUMNS, and COMET beside chrF where it was computed."""
    names = list(COLUMNS)
    return names[:COMET_COLUMN] + ["COMET"] + names[COMET_COLUMN:] if "comet" in scores else names


def system_rows(scores: dict[str, Any], report: dict[str, Any]) -> list[list[str]]:
    """The systems table (`columns`), one row per scored system, as text."""
    rows = []
    for name, label in SYSTEMS.items():
        if name not in scores:
            continue
        s, r = scores[name], report.get(name) or {}
        params = f"{s['parameters']:,}" if "parameters" in s else "-"
        row = [label, f"{s['bleu']:.2f}", f"{s['chrf']:.2f}", speed_cell(r, "batch32"), speed_cell(r, "batch1"),
               params, megabytes(r.get("weight_bytes")), megabytes(r.get("checkpoint_bytes"))]
        if "comet" in scores:
            row.insert(COMET_COLUMN, f"{s['comet']:.4f}" if "comet" in s else "-")
        rows.append(row)
    return rows


def signed(x: float) -> str:
    return f"{round(x, 2) + 0.0:+.2f}"  # + 0.0: no "-0.00"


def gap_sentences(scores: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """The gaps in plain words: the student against the teacher, each int8 student against the fp32 one."""
    out = []
    for a, b in GAPS:
        if a not in scores or b not in scores:
            continue
        bleu = round(scores[a]["bleu"] - scores[b]["bleu"], 2) + 0.0
        chrf = round(scores[a]["chrf"] - scores[b]["chrf"], 2)
        comet = f", COMET {round(scores[a]['comet'] - scores[b]['comet'], 4) + 0.0:+.4f}" \
            if "comet" in scores[a] and "comet" in scores[b] else ""
        where = "above" if bleu > 0 else "below"
        said = f"{abs(bleu):.2f} BLEU {where}" if bleu else "the same BLEU as"
        line = f"{SYSTEMS[a]} - {SYSTEMS[b]}: BLEU {signed(bleu)}, chrF {signed(chrf)}{comet}: {SYSTEMS[a]} scores " \
               f"{said} {SYSTEMS[b]}."
        ra, rb = report.get(a) or {}, report.get(b) or {}
        times = [f"{ra[k]['tokens_per_s'] / rb[k]['tokens_per_s']:.2f} times as many tokens/s at batch {k[5:]}"
                 for k in ("batch32", "batch1") if k in ra and k in rb and rb[k]["tokens_per_s"]]
        if times:
            line += f" It decodes {' and '.join(times)}."
        out.append(line)
    return out


def render(path: Path, record: dict[str, Any], figures: dict[str, Any], tgt: str) -> str:
    """The whole page; `figures`: the report stage's own (not yet in `record`)."""
    scores = record["stages"]["score"]["figures"]
    parts = [f"<h1>Distillation report: {esc(path)}</h1>",
             f'<p class="note">Written {esc(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))} by '
             f"<code>nmt distill</code>. Machine: {esc(machine(figures))}.</p>",
             systems_section(scores, figures), gaps_section(scores, figures),
             packages_section(path, (record["stages"].get("export") or {}).get("figures") or {}, scores, tgt),
             cleaning_section(path), data_section(record),
             stages_section(record), commands_section(path, scores, tgt)]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>nmt distill report: {esc(path.name)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            f"{body}\n</body>\n</html>\n")


def machine(figures: dict[str, Any]) -> str:
    speed = figures.get("speed") or {}
    threads = f", {speed['threads']} threads" if "threads" in speed else ""
    return f"{platform.machine() or 'unknown'}, {os.cpu_count()} CPUs{threads}, torch {torch.__version__}"


def systems_section(scores: dict[str, Any], figures: dict[str, Any]) -> str:
    rows = system_rows(scores, figures)
    if not rows:
        reason = scores.get("skipped", "no system was scored")
        return f"<h2>Systems</h2>\n<p>No scores: {esc(reason)}.</p>"
    speed = figures.get("speed")
    how = (f"Decoding speed: output tokens per second (each line's best translation, EOS not counted), the first "
           f"{speed['lines']} test sources in batches of {speed['batch']} (b32) and the first {speed['lines_single']} "
           f"one at a time (b1), each system with its own beam; the median of {speed['rounds']} timed "
           f"round{'s' if speed['rounds'] != 1 else ''} in which the systems took turns." if speed
           else "Decoding speed was not measured (distill.speed_rounds is 0).")
    details = [f"{SYSTEMS[name]}: {f['device']}, beam {f['beam']}" + (", int8" if f.get("quantize") else "")
               for name, f in figures.items() if name in SYSTEMS and "device" in f]
    teacher_file = "teacher" in scores and "checkpoint" not in (figures.get("teacher") or {})
    notes = [f"BLEU and chrF: sacreBLEU (<code>nmt score</code>) on the {scores['lines']:,} lines of data.test, "
             f"BLEU tokenizer {esc(scores['tokenize'])}.", comet_note(scores), esc(how),
             esc("Where they ran: " + "; ".join(details) + ".") if details else "",
             "Weights: the bytes of the checkpoint's distinct weights (fp32 for nmt's own models). Checkpoint file: "
             "its size on disk (best.pt and last.pt also hold the optimizer's state). The int8 rows load the fp32 "
             "checkpoint and round its Linear layers to int8 as they load: no int8 file is written, so their sizes "
             "are the fp32 ones.",
             "The teacher is a file of translations: it has no speed and no size." if teacher_file else ""]
    header = columns(scores)
    table_html = table(header, rows, numeric=set(range(1, len(header))))
    return "<h2>Systems</h2>\n" + table_html + "".join(f'<p class="note">{n}</p>\n' for n in notes if n)


def comet_note(scores: dict[str, Any]) -> str:
    """What the COMET column is: the model, and how it was computed."""
    comet = scores.get("comet")
    if not comet:
        return ""
    return esc(f"COMET: the mean of the segment scores of the COMET model {comet['model']} ({comet['signature']}), "
               "computed by nmt's own implementation of unbabel-comet's inference (checked against unbabel-comet's "
               f"own scores: tests/core/test_comet.py), in {comet['seconds']:,.1f} s.")


def gaps_section(scores: dict[str, Any], figures: dict[str, Any]) -> str:
    lines = gap_sentences(scores, figures)
    if not lines:
        return ""
    items = "".join(f"<li>{esc(line)}</li>\n" for line in lines)
    return ("<h2>Gaps</h2>\n<ul>\n" + items + "</ul>\n<p class=\"note\">Each gap is the first system's score minus "
            "the second's: a negative number is a loss. A test set of a few hundred lines is small: a gap of a few "
            "tenths of a BLEU point can be noise.</p>")


def package_rows(path: Path, export: dict[str, Any]) -> list[list[str]]:
    """The packages table (PACKAGE_COLUMNS), one row per target of distill.export, as text; a package not made has
    its note where its path would be."""
    rows = []
    for target, p in (export.get("packages") or {}).items():
        where = "; ".join(text for text in (str(path / p["path"]) if "path" in p else "", p.get("note", "")) if text)
        rows.append([target, p["precision"], megabytes(p.get("bytes")), f"{p['bleu']:.2f}" if "bleu" in p else "-",
                     f"{p['chrf']:.2f}" if "chrf" in p else "-", where])
    return rows


def package_gap(scores: dict[str, Any], export: dict[str, Any]) -> str:
    """The CTranslate2 int8 package against the fp32 student, and nmt's own int8 of the same weights beside it."""
    ct2 = (export.get("packages") or {}).get("ct2") or {}
    if "bleu" not in ct2 or "student" not in scores:
        return ""
    student = scores["student"]
    line = (f"CTranslate2 int8 package - {SYSTEMS['student']}: BLEU {signed(ct2['bleu'] - student['bleu'])}, chrF "
            f"{signed(ct2['chrf'] - student['chrf'])}.")
    same = export.get("system")
    if same in scores:
        line += (f" {SYSTEMS[same]} - {SYSTEMS['student']}, the same weights in nmt's int8: BLEU "
                 f"{signed(scores[same]['bleu'] - student['bleu'])}.")
    return line


def packages_section(path: Path, export: dict[str, Any], scores: dict[str, Any], tgt: str) -> str:
    """The export stage's packages: size, BLEU where measured, path; how each is used."""
    if not export:
        return ""
    if "skipped" in export:
        return f"<h2>Packages</h2>\n<p>No packages: {esc(export['skipped'])}.</p>"
    packages = export.get("packages") or {}
    ct2 = packages.get("ct2") or {}
    rescore = (f"nmt score --ref {shlex.quote(str(path / 'score' / f'test.ref.{tgt}'))} --hyp "
               f"{shlex.quote(str(path / ct2.get('output', '')))} --metrics bleu,chrf --tokenize "
               f"{shlex.quote(str(scores.get('tokenize')))}")
    notes = [f"Made by <code>nmt export</code> of {esc(export['from'])}. Size: the bytes on disk (a directory: all "
             "its files).", esc(package_gap(scores, export)),
             "CTranslate2's BLEU and chrF: the package itself translated the test set on the CPU with "
             "<code>compute_type=\"int8\"</code> (which rounds more than nmt's int8: the embeddings too, the "
             "activations row by row), with nmt's search settings and the <code>average</code> length penalty "
             f"(CTranslate2 has no other), scored as the systems above: <code>{esc(rescore)}</code> gives them again."
             if "bleu" in ct2 else "",
             "The Argos package is not installed here (that writes into Argos Translate's own package directory): "
             "<code>argostranslate.package.install_from_path(PATH)</code> installs it, then LibreTranslate serves "
             "it." if "path" in (packages.get("argos") or {}) else "",
             "The Hugging Face directory holds float32 weights: it has no int8 form of its own (quantize after "
             "loading in transformers)." if "path" in (packages.get("hf") or {}) else ""]
    table_html = table(list(PACKAGE_COLUMNS), package_rows(path, export), numeric={2, 3, 4}, text={5})
    return "<h2>Packages</h2>\n" + table_html + "".join(f'<p class="note">{n}</p>\n' for n in notes if n)


def cleaning_section(path: Path) -> str:
    """The filters' counts and the pairs each one dropped (clean/report.json)."""
    file = path / "clean" / "report.json"
    if not file.is_file():
        return ""
    clean = json.loads(file.read_text(encoding="utf-8"))
    counts = [[name, f"{clean['dropped'].get(name, 0):,}"] for name in FILTERS]
    out = [f"<h2>Cleaning</h2>\n<p>Read {clean['read']:,} pairs of data.train, kept {clean['kept']:,}. Each "
           "dropped pair is counted under the first filter that drops it.</p>",
           table(["filter", "dropped"], counts, numeric={1})]
    out += [f'<p class="note">Note: {esc(note)}</p>' for note in clean.get("notes", [])]
    for name, samples in (clean.get("samples") or {}).items():
        rows = [[str(s["line"]), s["src"], s["tgt"], s.get("why", "")] for s in samples]
        out.append(f"<h3>{esc(name)}: the first {len(rows)} of {clean['dropped'].get(name, 0):,} dropped</h3>")
        out.append(table(["line", "source", "target", "why"], rows, numeric={0}, text={1, 2}))
    return "\n".join(out)


def data_section(record: dict[str, Any]) -> str:
    """The student's training pairs by where they come from (the data stage's counts), and what the filters dropped
    of the back-translated ones."""
    f = record["stages"].get("data", {}).get("figures") or {}
    if "teacher_pairs" not in f:
        return ""
    how = {"sampled": "sampled", "translations file": "from the translations file"}.get(f.get("teacher_output"),
                                                                                         "beam search")
    rows = [[f"the teacher's translations ({how})", f"{f['teacher_pairs']:,}"],
            ["the teacher's other n-best translations", f"{f.get('nbest_pairs', 0):,}"],
            ["back-translated: synthetic source, real target", f"{f.get('backtranslated_pairs', 0):,}"],
            ["the original references", f"{f['reference_pairs']:,}"]]
    out = ["<h2>Training data</h2>\n<p>The student's training pairs (distilled/), by where they come from. "
           f"nmt prepare then kept {f['pairs']:,} of them (its own length rules).</p>",
           table(["pairs", "count"], rows, numeric={1})]
    bt = record["stages"].get("backtranslate", {}).get("figures") or {}
    if "kept" in bt:
        dropped = ", ".join(f"{k} {v:,}" for k, v in bt["dropped"].items() if v) or "none"
        out.append(f"<p>Back-translation: {bt['read']:,} monolingual lines, {bt['kept']:,} pairs kept; the filters "
                   f"dropped {esc(dropped)} (backtranslate/report.json has the pairs).</p>")
    return "\n".join(out)


def stages_section(record: dict[str, Any]) -> str:
    rows = []
    for name in STAGES:
        stage = record["stages"].get(name) or {}
        seconds = stage.get("seconds")
        state = "running (writing this page)" if name == "report" else stage.get("state", "pending")
        rows.append([name, state, "" if seconds is None else f"{seconds:,.1f} s"])
    return "<h2>Stages</h2>\n" + table(["stage", "state", "time"], rows, numeric={2})


def commands_section(path: Path, scores: dict[str, Any], tgt: str) -> str:
    """The `nmt score` command line of each system's output: the same numbers again."""
    ref = path / "score" / f"test.ref.{tgt}"
    hyp = {name: shlex.quote(str(path / "score" / f"test.{name}.{tgt}")) for name in SYSTEMS}
    comet = scores.get("comet")
    sources = next(iter(sorted((path / "score").glob("test.src.*"))), None) if comet else None
    with_comet = f" --comet {shlex.quote(comet['model'])} --src {shlex.quote(str(sources))}" if sources else ""
    lines = [f"nmt score --ref {shlex.quote(str(ref))} --hyp {hyp[name]} --metrics bleu,chrf "
             f"--tokenize {shlex.quote(scores['tokenize'])}{with_comet}  # {label}" for name, label in SYSTEMS.items()
             if name in scores]
    lines.append(f"nmt info {shlex.quote(str(path))}                # every stage's figures (--json: pipeline.json)")
    digits = " (COMET's last digit can differ: its sums are added in another order)" if comet else ""
    return ("<h2>Check the numbers</h2>\n<p>Each system's translations of data.test are in score/. These commands "
            f"score them again{digits}:</p>\n<pre>" + esc("\n".join(lines)) + "</pre>")
