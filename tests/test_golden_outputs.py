"""Golden outputs of a pre-norm model and of `nmt explain` (the rules: tests/golden.py).

- tests/fixtures/prenorm-model.pt, the options of configs/multi30k.yaml (pre-norm, one joint vocabulary, all embeddings
  shared) at a tiny size, trained briefly on Multi30k (tests/fixtures/make_prenorm_model.py), translates the first 100
  lines of Multi30k's test2016.en: greedy, beam 4, the 3 best of beam 4 with their scores, and with
  tests/fixtures/golden/prenorm-glossary.tsv (terms the model writes, synonyms it would not choose, words kept as they
  are). Skipped where Multi30k is absent (../shared/data/multi30k, or $NMT_SHARED/data/multi30k).
- `nmt explain` of one sentence with the demo model: its HTML page, byte for byte but for the time the walk took
  (the data's "seconds", masked) and the paths of the checkpoint and the page (none is written today; masked should
  one appear), and numbers within one unit of their last printed digit (see tests/golden.py).

    NMT_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden_outputs.py     # accept a deliberate change
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.golden import (
    DEMO,
    GOLDEN,
    PRENORM,
    check,
    check_text,
    checked_source,
    multi30k,
    nmt,
    same_up_to_last_digits,
    skip_without,
    translate,
)

LINES = 100
# sha256 of the first 100 lines of Multi30k's test2016.en: the input of the prenorm golden files
SOURCE_SHA256 = "5017668da780f255dd1fc2225a81c1dde68320d8c59839ddc09d79354e739f04"
MODES = {
    "greedy": ["--beam", "1"],
    "beam4": ["--beam", "4"],
    "nbest3": ["--beam", "4", "--nbest", "3", "--scores"],
    "glossary": ["--glossary", str(GOLDEN / "prenorm-glossary.tsv")],
}
SENTENCE = "I see the small red boat."
SECONDS = re.compile(r'"seconds":-?\d+(?:\.\d+)?')  # the time the walk took: masked


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    data = skip_without(multi30k(), "Multi30k (test2016.en)")
    lines = (data / "test2016.en").read_text(encoding="utf-8").split("\n")[:LINES]
    path = tmp_path_factory.mktemp("golden-multi30k") / "test2016.100.en"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return checked_source(path, SOURCE_SHA256, f"the first {LINES} lines of Multi30k's test2016.en")


def test_prenorm_model_is_the_multi30k_shape():
    shown = nmt("info", PRENORM)
    for fact in ("pre-norm", "(joint)", "src+tgt+output", "2 encoder, 2 decoder", "d_model 64"):
        assert fact in shown, shown


@pytest.mark.parametrize("mode", list(MODES))
def test_prenorm_translate_matches_golden(mode, source, tmp_path):
    got = translate(PRENORM, source, tmp_path / f"{mode}.txt", MODES[mode])
    check_text(GOLDEN / f"prenorm-model.{mode}.txt", got, scored="--scores" in MODES[mode])


def masked_page(page: str, *paths: Path) -> str:
    """The page with the walk's time and the paths (and file names) of `paths` replaced by fixed strings."""
    page = SECONDS.sub('"seconds":0.0', page)
    for i, path in enumerate(paths):
        page = page.replace(str(path), f"PATH{i}").replace(path.name, f"NAME{i}")
    return page


def test_explain_page_matches_golden(tmp_path):
    out = tmp_path / "page.html"
    nmt("explain", SENTENCE, "--checkpoint", DEMO, "--output", out)
    got = masked_page(out.read_text(encoding="utf-8"), DEMO, out)
    check(GOLDEN / "explain.demo-model.html", got.encode("utf-8"),
          lambda got, want: same_up_to_last_digits(got.decode("utf-8"), want.decode("utf-8")))
