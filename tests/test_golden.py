"""Golden outputs: `nmt translate` on a fixed checkpoint must print exactly what it printed before.

Guards against refactors (search, model, tokenizer, checkpoint loading, output formatting) silently changing
translations: tests/fixtures/demo-model.pt is a small demo model (conftest's demo_run recipe, training state
dropped), and tests/fixtures/demo-model.{greedy,beam5,nbest3}.txt are its translations of the demo test set
(write_demo(..., seed=3), regenerated here) as the code printed them when they were made. Byte-identical, except the
printed log-probabilities of --scores. tests/fixtures/golden/demo-model.glossary.txt is the same test set translated
with tests/fixtures/golden/demo-glossary.tsv: terms the model writes by itself (garden -> Garten), synonyms it would
not choose (small -> winzig, boat -> Schiff), a term at a sentence's start (bought -> erworben: "Erworben") and a
word kept untranslated (euros). The other golden outputs (a pre-norm model, documents, `nmt explain`, `nmt serve`):
tests/test_golden_*.py, with the shared rules of tests/golden.py.

To accept a deliberate change of output, regenerate the golden files with the new code and review the diff:
    NMT_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.demo.files import write_demo
from tests.helpers.golden import DATA, DEMO, GOLDEN, MODES, SOURCE_SHA256, check_text, checked_source, translate


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    raw = write_demo(tmp_path_factory.mktemp("golden-raw"), n_train=2000, n_valid=100, n_test=100, seed=3)
    return checked_source(Path(raw["test"] + ".en"), SOURCE_SHA256, "the demo test set (nmt.demo.german)")


@pytest.mark.parametrize("mode", list(MODES))
def test_translate_output_matches_golden(mode, source, tmp_path):
    got = translate(DEMO, source, tmp_path / f"{mode}.txt", MODES[mode])
    check_text(DATA / f"demo-model.{mode}.txt", got, scored="--scores" in MODES[mode])


def test_glossary_output_matches_golden(source, tmp_path):
    got = translate(DEMO, source, tmp_path / "glossary.txt", ["--glossary", str(GOLDEN / "demo-glossary.tsv")])
    check_text(GOLDEN / "demo-model.glossary.txt", got)
