"""`nmt info PIPELINE_DIR`: every stage of a distillation pipeline with its state and figures, as a table or as one
JSON object (pipeline.json as recorded, plus the path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from nmt.distill.state import INT8_STAGE, STAGES, SYSTEMS, read_record


def describe(path: Path) -> dict[str, Any]:
    record = read_record(path)
    return {"type": "pipeline", "path": str(path), "stages": {name: record["stages"].get(name, {"state": "pending"})
                                                              for name in STAGES},
            "settings": record.get("settings")}


def run(path: Path, json_out: bool = False) -> None:
    info = describe(path)
    if json_out:
        print(json.dumps(info, ensure_ascii=False))
    else:
        Console(highlight=False).print(table(info))


def table(info: dict[str, Any]) -> Table:
    out = Table(title=Text(f"distillation pipeline {info['path']}"), title_justify="left")
    for name, justify in (("stage", "left"), ("state", "left"), ("time", "right"), ("figures", "left")):
        out.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for name, stage in info["stages"].items():
        state = stage.get("state", "pending")
        if state == "running":
            state = "unfinished (running or stopped)"
        seconds = stage.get("seconds")
        out.add_row(name, state, "" if seconds is None else f"{seconds:,.1f} s",
                    Text(figures_line(name, stage.get("figures") or {})))
    return out


def figures_line(name: str, f: dict[str, Any]) -> str:
    """A stage's figures in a few words."""
    if not f:
        return ""
    if name == "clean":
        dropped = dropped_line(f)
        return f"read {f['read']:,}, kept {f['kept']:,}" + (f"; dropped {dropped}" if dropped else "")
    if name == "teacher":
        if "from_file" in f:
            return f"{f.get('lines', 0):,} translations from {f['from_file']}"
        return chunks_line(f)
    if name == "data":
        dropped = ", ".join(f"{k} {v:,}" for k, v in (f.get("filters") or {}).items()
                            if k not in ("read", "kept") and v)
        return f"{f['pairs']:,} training pairs ({pairs_line(f)}{'; prepare dropped ' + dropped if dropped else ''})" \
            f", vocabulary {f['vocab_size']:,}"
    if name == "student":
        best = f", best valid {f['best']:.2f}" if isinstance(f.get("best"), (int, float)) else ""
        return f"{f['updates']:,} updates ({f['stopped']}){best}, {f['parameters']:,} parameters"
    if "skipped" in f:
        return f"skipped: {f['skipped']}"
    if name == "backtranslate":
        kept = f"; kept {f['kept']:,} of {f['read']:,} pairs" if "kept" in f else ""
        return chunks_line(f) + kept + (f" (dropped {dropped_line(f)})" if dropped_line(f) else "")
    if name == INT8_STAGE:
        best = f", best valid {f['best']:.2f}" if isinstance(f.get("best"), (int, float)) else ""
        return f"{f['updates']:,} int8-aware updates from {f['from']} ({f['stopped']}), lr {f['lr']:.2g}{best}"
    if name == "score":  # one line per system: fp32 and int8 read one under the other
        parts = [f"{label}: BLEU {f[who]['bleu']:.2f} chrF {f[who]['chrf']:.2f}"
                 + (f" COMET {f[who]['comet']:.4f}" if "comet" in f[who] else "")
                 + (f" ({f[who]['translate_s']:.1f} s)" if "translate_s" in f[who] else "")
                 for who, label in SYSTEMS.items() if who in f]
        return f"{f['lines']:,} test lines:\n" + "\n".join(parts)
    if name == "report":
        return report_line(f)
    if name == "export":
        return export_line(f)
    return json.dumps(f)


def dropped_line(f: dict[str, Any]) -> str:
    """Each cleaning filter that dropped pairs, with its count."""
    return ", ".join(f"{k} {v:,}" for k, v in (f.get("dropped") or {}).items() if v)


def chunks_line(f: dict[str, Any]) -> str:
    """A chunked translation's progress and speed (the teacher's, the back-translation's), and what it wrote."""
    rate = f", {f['lines_per_s']:,} lines/s" if f.get("lines_per_s") else ""
    how = (", sampled" if f.get("sampled") else "") + (f", {f['nbest']} best each" if f.get("nbest", 1) > 1 else "")
    return f"chunks {f.get('chunks_done', 0)}/{f.get('chunks', '?')}" + \
        (f", {f['lines']:,} lines" if "lines" in f else "") + how + rate


def pairs_line(f: dict[str, Any]) -> str:
    """Where the student's training pairs come from: the teacher (beam search, sampled or a file; its other n-best
    translations), the back-translation, the references."""
    kind = {"sampled": " (sampled)", "translations file": " (file)"}.get(f.get("teacher_output", ""), "")
    parts = [f"{f['teacher_pairs']:,} teacher{kind}"]
    parts += [f"{f[key]:,} {label}" for key, label in (("nbest_pairs", "more n-best"),
                                                       ("backtranslated_pairs", "back-translated"))
              if f.get(key)]
    return " + ".join([*parts, f"{f['reference_pairs']:,} references"])


def report_line(f: dict[str, Any]) -> str:
    """The report stage's figures: its page, and each model's decoding speed at batch 32 and 1."""
    speeds = [f"{label}: " + " / ".join(f"{f[who][k]['tokens_per_s']:,.0f}" if k in f[who] else "-"
                                        for k in ("batch32", "batch1"))
              for who, label in SYSTEMS.items() if who in f and ("batch32" in f[who] or "batch1" in f[who])]
    return f["html"] + ("; tokens/s at batch 32 / 1:\n" + "\n".join(speeds) if speeds else "")


def export_line(f: dict[str, Any]) -> str:
    """The export stage's figures: one line per package (precision, size, BLEU where measured), or its note."""
    lines = []
    for target, p in (f.get("packages") or {}).items():
        size = f", {p['bytes'] / 1e6:,.2f} MB" if "bytes" in p else ""
        bleu = f", BLEU {p['bleu']:.2f} chrF {p['chrf']:.2f} ({p['translate_s']:.1f} s)" if "bleu" in p else ""
        where = f" in {p['path']}" if "path" in p else ""
        note = f"; {p['note']}" if "note" in p and where else f": {p['note']}" if "note" in p else ""
        lines.append(f"{target} {p['precision']}{size}{bleu}{where}{note}")
    return "\n".join(lines)
