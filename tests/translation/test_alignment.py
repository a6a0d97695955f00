"""nmt.translation.alignment, the one owner of word alignment: pieces grouped into words, piece attention aggregated
to word scores, Pharaoh pairs; then `nmt translate --alignment`, which writes the links documents place formatting by
(`aligned`), checked through the CLI against the committed demo model's own translations."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from nmt.translation.alignment import aligned, format_pharaoh, link_pairs, links, word_scores, word_spans
from tests.helpers.cli import nmt_process, run_cli
from tests.helpers.paths import DEMO_MODEL

CHECKPOINT = DEMO_MODEL
PHARAOH = re.compile(r"(\d+-\d+( \d+-\d+)*)?")  # "i-j" pairs, one space apart; an empty line has none


def test_word_spans() -> None:
    assert word_spans([]) == []
    assert word_spans(["▁forty", "-", "two", "▁cats"]) == [(0, 3), (3, 4)]
    assert word_spans(["un", "▁known"]) == [(0, 1), (1, 2)]  # the first piece always starts a word
    assert word_spans(["▁", "4", "2", "▁x"]) == [(0, 3), (3, 4)]


# source words: "forty-two" (3 pieces) "cats" (1) "sleep" (2); target words: "A" (1) "B" (1) "Cc" (2)
SRC_P = ["▁forty", "-", "two", "▁cats", "▁sle", "ep"]
TGT_P = ["▁A", "▁B", "▁C", "c"]


def piece_matrix(word_map: dict[int, int]) -> np.ndarray:
    """A [T, S] piece attention where each target word's pieces attend evenly to one source word."""
    src_words, tgt_words = word_spans(SRC_P), word_spans(TGT_P)
    m = np.full((len(TGT_P), len(SRC_P)), 0.01)
    for j, (ts, te) in enumerate(tgt_words):
        s, e = src_words[word_map[j]]
        m[ts:te, s:e] += 0.9 / (e - s)
    return m / m.sum(axis=1, keepdims=True)


def argmax_pairs(matrix, src_pieces: list[str], tgt_pieces: list[str]) -> list[tuple[int, int]]:
    """(source word, target word) pairs of each target word's best source word by `word_scores`."""
    return link_pairs(links(word_scores(matrix, src_pieces, tgt_pieces), "argmax"))


def test_word_scores_diagonal_and_anti_diagonal() -> None:
    diag = piece_matrix({0: 0, 1: 1, 2: 2})
    assert argmax_pairs(diag, SRC_P, TGT_P) == [(0, 0), (1, 1), (2, 2)]
    anti = piece_matrix({0: 2, 1: 1, 2: 0})
    scores = word_scores(anti, SRC_P, TGT_P)
    assert scores.shape == (3, 3)  # [target words, source words]
    assert argmax_pairs(anti, SRC_P, TGT_P) == [(0, 2), (1, 1), (2, 0)]


def test_word_scores_sum_source_pieces() -> None:
    # Piece-level argmax would pick "cats" (0.3 > 0.22 each) but "forty-two" holds 0.66 in total.
    m = np.zeros((1, len(SRC_P)))
    m[0, :3] = 0.22
    m[0, 3] = 0.3
    assert np.allclose(word_scores(m, SRC_P, ["▁x"]), [[0.66, 0.3, 0.0]])
    assert argmax_pairs(m, SRC_P, ["▁x"]) == [(0, 0)]


def test_word_scores_mean_target_pieces() -> None:
    # Target word 2 = pieces 2, 3: one leans to source word 1 weakly, the other strongly to word 2.
    m = np.full((len(TGT_P), len(SRC_P)), 0.0)
    m[0, 0] = m[1, 3] = 1.0
    m[2, 3], m[2, 4] = 0.55, 0.45
    m[3, 4] = 1.0
    assert np.allclose(word_scores(m, SRC_P, TGT_P)[2], [0.0, 0.275, 0.725])
    assert argmax_pairs(m, SRC_P, TGT_P) == [(0, 0), (1, 1), (2, 2)]


def test_word_scores_trim_eos() -> None:
    m = piece_matrix({0: 1, 1: 0, 2: 2})
    big = np.zeros((m.shape[0] + 1, m.shape[1] + 1))
    big[:-1, :-1] = m * 0.5
    big[:, -1] = 0.6  # the EOS column wins every row at piece level, but must be ignored
    assert argmax_pairs(big, SRC_P, TGT_P) == [(0, 1), (1, 0), (2, 2)]
    assert word_scores(big, [], TGT_P).shape == (3, 0) and argmax_pairs(big, [], TGT_P) == []
    with pytest.raises(ValueError, match="smaller"):
        word_scores(m[:, :2], SRC_P, TGT_P)
    with pytest.raises(ValueError, match="2 dimensions"):
        word_scores(m[None], SRC_P, TGT_P)


def test_word_scores_accept_a_bf16_tensor() -> None:
    torch = pytest.importorskip("torch")
    m = torch.tensor(piece_matrix({0: 2, 1: 1, 2: 0}), dtype=torch.bfloat16)
    assert argmax_pairs(m, SRC_P, TGT_P) == [(0, 2), (1, 1), (2, 0)]


def test_link_pairs_and_pharaoh_format() -> None:
    hard = np.zeros((3, 4), dtype=bool)  # [target words, source words]
    hard[0, 3] = hard[2, 0] = hard[1, 0] = True
    assert link_pairs(hard) == [(0, 1), (0, 2), (3, 0)]  # (source, target), sorted by source word first
    assert format_pharaoh(link_pairs(hard)) == "0-1 0-2 3-0"
    assert link_pairs(None) == [] and format_pharaoh([]) == ""


def test_alignment_loads_no_plotting() -> None:
    """Word alignment, and `nmt translate` that writes it, need neither nmt.plot nor matplotlib."""
    code = ("import sys, nmt.translation.alignment, nmt.translation.command; "
            "print(sorted(m for m in sys.modules if m.startswith(('nmt.plot', 'matplotlib'))))")
    done = nmt_process(code, entry=("-c",), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "[]"


# ---- `nmt translate --alignment` with the committed demo model

LINES = ["A blue apple is in the garden.", "", "the twenty-sixth of December eighteen forty-three",
         "We bought five big yellow streets for nine thousand three hundred thirty-four euros."]


@pytest.fixture(scope="module")
def translator():
    from nmt.translation.translator import Translator

    return Translator.load(CHECKPOINT)


def translate_with_alignment(tmp_path: Path, *options: str) -> tuple[list[str], list[str]]:
    """(output lines, alignment lines) of `nmt translate --alignment` over LINES."""
    source, out, align = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "align.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = run_cli("translate", "--checkpoint", CHECKPOINT, "--dtype", "fp32", "--threads", "1", "--no-progress",
                     "-i", source, "-o", out, "--alignment", align, *options)
    assert result.exit_code == 0, result.output[-3000:]
    text = align.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return out.read_text(encoding="utf-8").splitlines(), text[:-1].split("\n")


@pytest.mark.parametrize("search", [{}, {"beam": 5, "nbest": 3}], ids=["default", "nbest3"])
def test_translate_alignment_writes_the_links_documents_use(search, translator, tmp_path) -> None:
    options = [f"--{k}={v}" for k, v in search.items()]
    out, align = translate_with_alignment(tmp_path, *options)
    results = translator.translate_chunk(LINES, need_attention=True, decode=translator.decode_with(**search))
    best = [r.text[0] for r in results]
    if search:  # n-best rows "line<TAB>text<TAB>score": the best first, an empty line one row
        rows = [row.split("\t") for row in out]
        assert [next(text for n, text, _ in rows if int(n) == k) for k in range(1, len(LINES) + 1)] == best
        assert len(rows) > len(LINES)
    else:
        assert out == best  # the translations the alignments below are of
    assert len(align) == len(LINES)  # one line per input line, with --nbest too: the best hypothesis's
    for line, result, written in zip(LINES, results, align, strict=True):
        assert PHARAOH.fullmatch(written), written
        pairs = [(int(i), int(j)) for i, j in (p.split("-") for p in written.split())]
        assert pairs == link_pairs(aligned(translator.tokenizer, result).links)
        n_src, n_tgt = len(line.split()), len(result.text[0].split())
        assert all(0 <= i < n_src and 0 <= j < n_tgt for i, j in pairs), (written, n_src, n_tgt)
        assert bool(pairs) == bool(line)  # an empty line gets an empty line, a translated one its links
    # "Ein blaue Ball ist im Garten.": each word on its source word, "in the" -> "im"; each target word's row argmax
    # (what --alignment wrote before) put "Ball ist im" on "garden." ("6-2 6-3 6-4")
    assert align[0] == "0-0 1-1 2-2 3-3 5-4 6-5"
