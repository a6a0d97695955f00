"""Issue 46's real-document figures: every docx, pptx, odt, epub, html, md, srt and vtt file in the test folders of
other people's tools (the mirrors fetched on this machine), translated as `nmt translate -i X -o Y` does it, and
checked.

    python bench/real_documents.py --checkpoint tests/fixtures/demo-model.pt --libreoffice [--kinds docx,md]
        [--mirrors /work/.mirror] [--only REGEX] [--limit N] [--json results.json]

Sources (`SOURCES`): pandoc's test/, Apache POI's test-data/, odfpy's tests/, pysrt's and webvtt-py's tests/,
python-docx's and python-pptx's test_files/, ebooklib's and markdown-it-py's tests/, and the IDPF EPUB 3 samples
(stored unzipped: each 30/NAME/ folder is zipped here, mimetype first and stored, as the EPUB container asks). They
are extracted into a temp dir, never kept: their licences are theirs. The model is loaded once and each file goes
through `nmt.translation.documents.translate_document`, the function `nmt translate` calls after the same
`check_document` (a refusal is its one-line NmtError; anything else is a crash, a defect).

Per kind and in total it reports:
- tried / written / refused (the first reasons) / crashed;
- opens: the output opens in its own library (python-docx, python-pptx, odfpy, ebooklib, lxml.html, markdown-it
  with the same blocks as the source, pysrt / webvtt-py with the same timings); an output whose source does not
  open either is not counted against it;
- with --libreoffice: every docx/pptx/odt output converted by `soffice --headless --convert-to pdf` (one profile,
  sequentially, 180 s each); a failure is retried on the source to tell whose it is;
- zip containers: member names and order, and the bytes, date and compression of every member that is not a text
  part (bench/real_checks.py TEXT_PARTS) unchanged;
- glued atoms and doubled punctuation (bench/office_fixtures.py's rules; HTML, EPUB and Markdown atoms are what nmt
  keeps as written), counted per paragraph where the output has more than its source;
- text left in the source language: a paragraph or cue whose translatable text (atoms, deletions and moves'
  origins out) has >= 3 letter words and comes back verbatim; and Office runs still marked with the source language
  (office_fixtures' count), split by why (real_checks.marked_runs). "other" is the bucket that matters.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import real_checks as rc  # noqa: E402  (bench/ is sys.path[0], as for the other bench scripts)
from office_fixtures import DOUBLED, measure  # noqa: E402

# mirror (owner+name) -> the paths taken from it
SOURCES = {
    "jgm+pandoc": r"test/.*", "apache+poi": r"test-data/.*", "eea+odfpy": r"tests/.*",
    "byroot+pysrt": r"tests/.*", "glut23+webvtt-py": r"tests/.*", "python-openxml+python-docx": r".*test_files/.*",
    "scanny+python-pptx": r".*test_files/.*", "aerkalov+ebooklib": r"tests/.*",
    "executablebooks+markdown-it-py": r"tests/.*", "IDPF+epub3-samples": r"30/[^/]+/.*",
}
KINDS = {".docx": "docx", ".pptx": "pptx", ".odt": "odt", ".epub": "epub", ".html": "html", ".htm": "html",
         ".md": "md", ".markdown": "md", ".srt": "srt", ".vtt": "vtt"}
LIBRARIES = {"byroot+pysrt": "pysrt", "glut23+webvtt-py": "webvtt"}  # imported from the mirror if not installed
EXAMPLES = 8


def git_dir(mirror: Path) -> Path:
    return mirror / "repo" / ".git" if (mirror / "repo" / ".git").is_dir() else mirror / "repo"


def listing(gdir: Path) -> list[str]:
    out = subprocess.run(["git", "--git-dir", str(gdir), "ls-tree", "-r", "-z", "--name-only", "HEAD"],
                         capture_output=True, check=True).stdout
    return [name.decode() for name in out.split(b"\0") if name]


def extract(gdir: Path, names: list[str]) -> dict[str, bytes]:
    """The blobs at HEAD, through one `git cat-file --batch` (a blob the snapshot lacks is left out, said once)."""
    data = subprocess.run(["git", "--git-dir", str(gdir), "cat-file", "--batch"], check=True, capture_output=True,
                          input="".join(f"HEAD:{n}\n" for n in names).encode()).stdout
    out, at, absent = {}, 0, []
    for name in names:
        header_end = data.index(b"\n", at)
        header = data[at:header_end].split()
        if header[-1] == b"missing":
            absent.append(name)
            at = header_end + 1
            continue
        size = int(header[2])
        out[name] = data[header_end + 1:header_end + 1 + size]
        at = header_end + 2 + size
    if absent:
        print(f"({len(absent)} files absent from the snapshot in {gdir}: {absent[:3]}...)")
    return out


def collect(mirrors: Path, into: Path, kinds: set[str], only: str | None) -> list[tuple[str, Path]]:
    """(origin "mirror:path", extracted file) for every file of `kinds` that SOURCES names."""
    found: list[tuple[str, Path]] = []
    for mirror, wanted in SOURCES.items():
        if not (mirrors / mirror).is_dir():
            print(f"(mirror {mirror} absent: skipped)")
            continue
        gdir = git_dir(mirrors / mirror)
        names = [n for n in listing(gdir) if re.fullmatch(wanted, n)]
        if mirror == "IDPF+epub3-samples":
            picked = sorted({n.split("/")[1] for n in names}) if "epub" in kinds else []
            picked = [b for b in picked if not only or re.search(only, f"{mirror}:30/{b}.epub")]
            blobs = extract(gdir, [n for n in names if n.split("/")[1] in picked])
            for book in picked:
                found.append((f"{mirror}:30/{book}.epub", _zip_book(blobs, f"30/{book}/", into / mirror)))
            continue
        names = [n for n in names if KINDS.get(Path(n).suffix.lower()) in kinds
                 and (not only or re.search(only, f"{mirror}:{n}"))]
        for name, blob in extract(gdir, names).items():
            path = into / mirror / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
            found.append((f"{mirror}:{name}", path))
    return found


def _zip_book(blobs: dict[str, bytes], prefix: str, into: Path) -> Path:
    """An EPUB of a folder: mimetype first, stored; the rest deflated, in the mirror's order."""
    path = into / (prefix.strip("/") + ".epub")
    path.parent.mkdir(parents=True, exist_ok=True)
    members = {n[len(prefix):]: b for n, b in blobs.items() if n.startswith(prefix)}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", members.pop("mimetype", b"application/epub+zip"), zipfile.ZIP_STORED)
        for name, blob in members.items():
            z.writestr(name, blob, zipfile.ZIP_DEFLATED)
    return path


def importable(mirrors: Path, into: Path) -> None:
    """pysrt and webvtt-py (pure Python, no dependencies) from their mirrors when they are not installed."""
    import importlib.util

    for mirror, package in LIBRARIES.items():
        if importlib.util.find_spec(package) is None and (mirrors / mirror).is_dir():
            gdir = git_dir(mirrors / mirror)
            names = [n for n in listing(gdir) if n.startswith(f"{package}/") and n.endswith(".py")]
            for name, blob in extract(gdir, names).items():
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                (into / name).write_bytes(blob)
    sys.path.append(str(into))


def check(src: Path, dst: Path, kind: str, lang: str, lo: tuple[Path, Path] | None) -> dict:
    """Every check of one translated file: a JSON-able record."""
    rec: dict = {"opens": rc.opens(dst, kind)}
    if rec["opens"] is None and kind in ("html", "md", "srt", "vtt") and rc.structure(src, kind) != rc.structure(
            dst, kind):
        rec["opens"] = "structure differs from the source's"
    if rec["opens"] is not None and rc.opens(src, kind) is not None:
        rec["opens"], rec["source does not open"] = None, True
    if lo and kind in rc.OFFICE:
        rec["libreoffice"] = rc.libreoffice(dst, lo[0], lo[1])
        if rec["libreoffice"] and rc.libreoffice(src, lo[0], lo[1]):
            rec["libreoffice (source fails too)"] = rec.pop("libreoffice")
    if zipfile.is_zipfile(src):
        rec["zip"] = rc.zip_changes(src, dst, kind)
    before, after = rc.paragraphs(src, kind), rc.paragraphs(dst, kind)
    if len(before) != len(after):  # paired by index no more: not compared
        rec["paragraph count"] = f"{len(before)} -> {len(after)}"
        before = after = []
    rec["glued"], rec["doubled"], rec["verbatim"], rec["emptied"], rec["prose"] = [], [], [], [], 0
    if kind in ("html", "epub"):  # a span with no free target word left is dropped, by nmt's stated rule
        tags = rc.inline_tags(src, kind), rc.inline_tags(dst, kind)
        rec["spans"] = [sum(tags[0].values()), sum((tags[0] - tags[1]).values()), sum((tags[1] - tags[0]).values())]
    for a, b in zip(before, after):
        rec["glued"] += rc.glued_atoms(a, b)
        if len(DOUBLED.findall(b)) > len(DOUBLED.findall(a)):
            rec["doubled"].append(b[:140])
        if rc.words(a) >= 3:
            rec["prose"] += 1
            if rc.prose(a) == rc.prose(b):
                rec["verbatim"].append(rc.prose(a)[:140])
        if rc.words(a) and not rc.prose(b):
            rec["emptied"].append(rc.prose(a)[:140])
    if kind in ("docx", "pptx"):
        counts = measure(src, lang), measure(dst, lang)
        rec["marked"] = [counts[0][f"runs marked {lang}"], counts[1][f"runs marked {lang}"]]
        unchanged = frozenset(rc.prose(b) for a, b in zip(before, after) if rc.prose(a) == rc.prose(b))
        marked = list(rc.marked_runs(dst, lang, unchanged))
        rec["marked why"] = Counter(why for why, _, _ in marked)
        rec["marked other"] = [f"{part}: {text!r}" for why, part, text in marked if why == "other"]
    return rec


def run(files: list[tuple[str, Path]], checkpoint: str, out: Path, libreoffice: bool) -> dict[str, dict]:
    from nmt.errors import NmtError
    from nmt.translation.documents import check_document, translate_document
    from nmt.translation.translator import Translator

    translator = Translator.load(checkpoint)
    lang = (translator.langs or ("en", "de"))[0]
    warnings: list[str] = []
    translator.warn = warnings.append  # counted per file (e.g. a sentence truncated at the model's length)
    lo = (out / "pdf", out / "profile") if libreoffice else None
    results: dict[str, dict] = {}
    for k, (origin, src) in enumerate(files, 1):
        kind = KINDS[src.suffix.lower()]
        dst = out / "out" / f"{k}{src.suffix}"
        dst.parent.mkdir(parents=True, exist_ok=True)
        warnings.clear()
        rec: dict = {"kind": kind}
        try:
            check_document(src, kind)  # `nmt translate` refuses here, before the model loads
            translate_document(translator, src, dst, kind)
        except NmtError as e:
            rec["refused"] = str(e).replace(str(src), src.name)
        except Exception as e:  # a traceback: a defect
            rec["crashed"] = f"{type(e).__name__}: {e} at {traceback.extract_tb(e.__traceback__)[-1][:3]}"
        else:
            rec["truncated"] = sum("truncated" in w for w in warnings)
            try:
                rec.update(check(src, dst, kind, lang, lo))
            except Exception as e:  # a check that cannot read the file (office_fixtures' parser, say)
                rec.update(opens=rc.opens(dst, kind), unchecked=f"{type(e).__name__}: {str(e)[:100]}")
        results[origin] = rec
        print(f"[{k}/{len(files)}] {origin}: {_brief(rec)}", flush=True)
    return results


def _brief(rec: dict) -> str:
    if "refused" in rec or "crashed" in rec:
        return ("refused: " + rec["refused"]) if "refused" in rec else ("CRASHED: " + rec["crashed"])
    notes = [f"{key}={len(rec[key])}" for key in ("glued", "doubled", "verbatim") if rec.get(key)]
    notes += [f"opens: {rec['opens']}"] if rec["opens"] else []
    notes += [f"UNCHECKED: {rec['unchecked']}"] if rec.get("unchecked") else []
    notes += [f"libreoffice: {rec['libreoffice']}"] if rec.get("libreoffice") else []
    notes += [f"zip {k}: {v[:3]}" for k, v in rec.get("zip", {}).items() if v and k != "text"]
    notes += [f"marked other={len(rec['marked other'])}"] if rec.get("marked other") else []
    return "ok " + " ".join(notes)


def report(results: dict[str, dict]) -> str:
    """Three markdown tables (files, text, Office language marks) per kind and in total, then the first examples of
    each defect."""
    rows: dict[str, Counter] = defaultdict(Counter)
    for rec in results.values():
        for kind in (rec["kind"], "total"):
            _add(rows[kind], rec)
    kinds = [k for k in ("docx", "pptx", "odt", "epub", "html", "md", "srt", "vtt", "total") if k in rows]
    whys = ("no letter", "field instruction", "deletion", "kept atom", "copied by the model", "paragraph mark", "other")
    files = {"tried": "{tried}", "written": "{written}", "refused": "{refused}", "crashed": "{crashed}",
             "unchecked": "{unchecked}", "opens (same structure)": "{opens}/{written}",
             "LibreOffice PDF": "{lo ok}/{lo tried}", "zip members kept": "{zip same}/{zips}"}
    text = {"glued atoms": "{glued}", "doubled punctuation": "{doubled}", "verbatim paragraphs": "{verbatim}/{prose}",
            "emptied paragraphs": "{emptied}", "truncated sentences": "{truncated}",
            "inline elements dropped (added)": "{spans dropped} ({spans added}) of {spans}"}
    marks = {"source": "{marked src}", "output": "{marked out}", **{w: f"{{why {w}}}" for w in whys}}
    office = [k for k in kinds if k in ("docx", "pptx")] + ["total"] * any(k in kinds for k in ("docx", "pptx"))
    return "\n\n".join([_table(rows, kinds, files), _table(rows, kinds, text),
                         "Runs marked with the source language, the output's by why:\n" + _table(rows, office, marks),
                         _examples(results)])


def _add(row: Counter, rec: dict) -> None:
    row["tried"] += 1
    if "refused" in rec or "crashed" in rec:
        row["refused" if "refused" in rec else "crashed"] += 1
        return
    row["written"] += 1
    row["opens"] += rec["opens"] is None
    row["lo tried"] += "libreoffice" in rec or "libreoffice (source fails too)" in rec
    row["lo ok"] += "libreoffice" in rec and rec["libreoffice"] is None
    if "zip" in rec:
        row["zips"] += 1
        row["zip same"] += not any(rec["zip"][k] for k in ("order", "bytes", "info"))
    for key in ("glued", "doubled", "verbatim", "emptied"):
        row[key] += len(rec.get(key, []))
    row.update({k: v for k, v in zip(("spans", "spans dropped", "spans added"), rec.get("spans", ()))})
    row.update(prose=rec.get("prose", 0), unchecked="unchecked" in rec, truncated=rec.get("truncated", 0))
    if "marked" in rec:
        row.update({"marked src": rec["marked"][0], "marked out": rec["marked"][1]})
        row.update({f"why {k}": v for k, v in rec["marked why"].items()})


def _table(rows: dict[str, Counter], kinds: list[str], columns: dict[str, str]) -> str:
    lines = ["| kind | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for kind in kinds:
        cells = [form.format_map(rows[kind]) for form in columns.values()]
        lines.append(f"| {kind} | " + " | ".join(c if c not in ("0/0", "0 (0) of 0") else "–" for c in cells) + " |")
    return "\n".join(lines)


def _examples(results: dict[str, dict]) -> str:
    out = []
    for key, title in (("refused", "refused"), ("crashed", "crashed"), ("unchecked", "a check failed"),
                       ("opens", "does not open, or its structure changed"),
                       ("libreoffice", "LibreOffice fails (its source converts)"), ("paragraph count",
                       "paragraph count changed"), ("glued", "glued atoms"), ("doubled", "doubled punctuation"),
                       ("verbatim", "verbatim paragraphs"), ("emptied", "emptied paragraphs"),
                       ("marked other", "runs marked, why: other")):
        hits = [(origin, rec[key]) for origin, rec in results.items() if rec.get(key)]
        if key == "opens" or key == "libreoffice" or key == "paragraph count":
            hits = [(o, v) for o, v in hits if isinstance(v, str)]
        if hits:
            out.append(f"\n{title} ({len(hits)} files):")
            out += [f"  {origin}: {value if isinstance(value, str) else value[:3]}" for origin, value in
                    hits[:EXAMPLES if key not in ("refused", "crashed") else None]]
    bad = [(o, k, v) for o, rec in results.items() for k, v in rec.get("zip", {}).items() if v and k != "text"]
    out += ["\nzip members changed:"] * bool(bad) + [f"  {o}: {k}: {v[:4]}" for o, k, v in bad[:EXAMPLES]]
    return "\n".join(out)


def _first(files: list[tuple[str, Path]], limit: int) -> list[tuple[str, Path]]:
    seen: Counter[str] = Counter()
    picked = []
    for origin, path in files:
        seen[KINDS[path.suffix.lower()]] += 1
        if seen[KINDS[path.suffix.lower()]] <= limit:
            picked.append((origin, path))
    return picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--kinds", default=",".join(sorted(set(KINDS.values()))))
    parser.add_argument("--only", help="a regex the origin (mirror:path) must match")
    parser.add_argument("--limit", type=int, help="at most N files of each kind")
    parser.add_argument("--libreoffice", action="store_true", help="convert Office/ODT outputs to PDF")
    parser.add_argument("--json", type=Path, help="write each file's record here")
    args = parser.parse_args()
    if args.libreoffice and not shutil.which("soffice"):
        raise SystemExit("--libreoffice: soffice not found (Debian: libreoffice-writer-nogui, -impress-nogui)")
    with tempfile.TemporaryDirectory(prefix="real-documents-") as tmp:
        importable(args.mirrors, Path(tmp) / "libs")
        files = collect(args.mirrors, Path(tmp) / "in", set(args.kinds.split(",")), args.only)
        if args.limit:
            files = _first(files, args.limit)
        results = run(files, args.checkpoint, Path(tmp), args.libreoffice)
    if args.json:
        from nmt.io import atomic_output

        with atomic_output(args.json, text=True) as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
    print(report(results))


if __name__ == "__main__":
    main()
