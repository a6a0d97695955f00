"""sacreBLEU wrapper: scores, signatures, errors, file reading and output formats."""

from __future__ import annotations

import io
import json

import pytest
import sacrebleu

from nmt.errors import NmtError
from nmt.score import corpus_bleu, format_json, format_text, read_lines, score, score_files

HYPS = [
    "The cat sat on the mat.",
    "There is a dog in the garden today.",
    "He reads a BOOK every evening.",
]
REFS = [
    "The cat is sitting on the mat.",
    "A dog is in the garden today.",
    "He reads a book each evening.",
]
REFS2 = [
    "A cat sat on the mat.",
    "There is a dog in the yard today.",
    "Every evening he reads a book.",
]


def test_perfect_hypothesis():
    r = score(REFS, [REFS])
    assert r["bleu"]["score"] == pytest.approx(100.0)
    assert r["chrf"]["score"] == pytest.approx(100.0)
    assert r["ter"]["score"] == pytest.approx(0.0)
    assert list(r) == ["bleu", "chrf", "ter"]


def test_matches_sacrebleu_directly():
    r = score(HYPS, [REFS])
    assert r["bleu"]["score"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert r["chrf"]["score"] == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert r["ter"]["score"] == sacrebleu.corpus_ter(HYPS, [REFS]).score
    assert 0 < r["bleu"]["score"] < 100
    assert r["bleu"]["text"] == str(sacrebleu.corpus_bleu(HYPS, [REFS]))
    assert r["bleu"]["hyp_len"] > 0 and len(r["bleu"]["precisions"]) == 4
    assert corpus_bleu(HYPS, REFS) == r["bleu"]["score"]
    assert corpus_bleu(HYPS, [REFS]) == r["bleu"]["score"]


def test_multiple_references():
    one = score(HYPS, [REFS])
    two = score(HYPS, [REFS, REFS2])
    assert two["bleu"]["score"] == sacrebleu.corpus_bleu(HYPS, [REFS, REFS2]).score
    assert two["bleu"]["score"] > one["bleu"]["score"]
    assert "nrefs:2" in two["bleu"]["signature"] and "nrefs:1" in one["bleu"]["signature"]


def test_line_count_mismatch_names_counts_and_file():
    with pytest.raises(NmtError, match=r"hypothesis has 3 lines but reference #2 has 2 lines"):
        score(HYPS, [REFS, REFS2[:2]])
    with pytest.raises(NmtError, match=r"hypothesis has 3 lines but reference ref\.de has 4 lines"):
        score(HYPS, [REFS + ["x"]], ref_names=["ref.de"])


def test_line_count_mismatch_from_files(tmp_path):
    hyp = tmp_path / "hyp.txt"
    ref = tmp_path / "ref.txt"
    hyp.write_text("a\nb\n", encoding="utf-8")
    ref.write_text("a\n", encoding="utf-8")
    with pytest.raises(NmtError) as exc:
        score_files(hyp, [ref])
    msg = str(exc.value)
    assert "2 lines" in msg and "1 lines" in msg and str(ref) in msg and "\n" not in msg


def test_unknown_metric_lists_valid_names():
    with pytest.raises(NmtError, match=r"unknown metric 'meteor' \(valid: bleu, chrf, chrf\+\+, ter\)"):
        score(HYPS, [REFS], metrics=("bleu", "meteor"))
    r = score(HYPS, [REFS], metrics="BLEU,chrf++")
    assert list(r) == ["bleu", "chrf++"]


def test_unknown_tokenizer():
    with pytest.raises(NmtError, match="unknown BLEU tokenizer 'moses'"):
        score(HYPS, [REFS], tokenize="moses")


def test_empty_corpus_scores_zero():
    r = score([], [[]])
    assert r["bleu"]["score"] == 0.0 and r["chrf"]["score"] == 0.0 and r["ter"]["score"] == 0.0
    assert all(m["signature"] for m in r.values())
    json.loads(format_json(r))
    with pytest.raises(NmtError, match="no reference"):
        score([], [])


def test_tokenize_and_lowercase_pass_through():
    hyps = ["the dog-friendly café,opened"]
    refs = [["the dog - friendly café , opened"]]
    default = score(hyps, refs, metrics=("bleu",))["bleu"]
    none = score(hyps, refs, metrics=("bleu",), tokenize="none")["bleu"]
    assert default["score"] == sacrebleu.corpus_bleu(hyps, refs).score
    assert none["score"] == sacrebleu.corpus_bleu(hyps, refs, tokenize="none").score
    assert none["score"] < default["score"]
    assert "tok:none" in none["signature"] and "tok:13a" in default["signature"]

    upper = ["THE CAT SAT ON THE MAT"]
    lower = [["the cat sat on the mat"]]
    cased = score(upper, lower, metrics=("bleu", "chrf"))
    lc = score(upper, lower, metrics=("bleu", "chrf"), lowercase=True)
    assert cased["bleu"]["score"] < 1 and lc["bleu"]["score"] == pytest.approx(100.0)
    assert cased["chrf"]["score"] < lc["chrf"]["score"] == pytest.approx(100.0)
    assert "case:lc" in lc["bleu"]["signature"] and "case:mixed" in cased["bleu"]["signature"]


def test_signatures_and_text_format():
    r = score(HYPS, [REFS])
    for m in r.values():
        assert "version:" in m["signature"] and "nrefs:1" in m["signature"]
    lines = format_text(r).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("BLEU|nrefs:1|") and " = " in lines[0]
    assert lines[1].startswith("chrF2|") and lines[2].startswith("TER|")
    assert f"{r['bleu']['score']:.2f}" in lines[0]


def test_json_output_is_one_parsable_line():
    r = score(HYPS, [REFS, REFS2])
    text = format_json(r)
    assert "\n" not in text
    back = json.loads(text)
    assert back["bleu"]["score"] == pytest.approx(r["bleu"]["score"])
    assert back["ter"]["signature"] == r["ter"]["signature"]


def test_read_lines_strips_only_newlines(tmp_path):
    p = tmp_path / "h.txt"
    p.write_bytes("\ufeffa  \r\n  b\t\n\nc\u2028d\ne\r".encode())
    assert read_lines(p) == ["a  ", "  b\t", "", "c\u2028d", "e\r"]
    p.write_bytes(b"")
    assert read_lines(p) == []
    p.write_bytes(b"\n")
    assert read_lines(p) == [""]
    p.write_bytes(b"x\ny")
    assert read_lines(str(p)) == ["x", "y"]


def test_read_lines_streams():
    assert read_lines(io.StringIO("a\nb\n")) == ["a", "b"]
    assert read_lines(io.BytesIO("é\r\nz\n".encode())) == ["é", "z"]
    text = io.TextIOWrapper(io.BytesIO(b"ok\n\xffbad\n"), encoding="utf-8")
    with pytest.raises(NmtError, match="line 2: invalid UTF-8"):
        read_lines(text)


def test_read_lines_errors(tmp_path):
    with pytest.raises(NmtError, match="nope.txt: no such file"):
        read_lines(tmp_path / "nope.txt")
    with pytest.raises(NmtError, match="is a directory"):
        read_lines(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nalso fine\nbro\xc3ken\n")
    with pytest.raises(NmtError) as exc:
        read_lines(bad)
    msg = str(exc.value)
    assert str(bad) in msg and "line 3" in msg and "invalid UTF-8" in msg and "\n" not in msg


def test_score_files_end_to_end(tmp_path):
    hyp, ref1, ref2 = tmp_path / "hyp", tmp_path / "ref1", tmp_path / "ref2"
    hyp.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    ref1.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    ref2.write_text("\r\n".join(REFS2) + "\r\n", encoding="utf-8")
    r = score_files(hyp, [ref1, ref2], metrics=("bleu",))
    assert r["bleu"]["score"] == sacrebleu.corpus_bleu(HYPS, [REFS, REFS2]).score
