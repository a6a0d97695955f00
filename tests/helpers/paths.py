"""Where things are: the checkout, the committed test fixtures, the Multi30k corpus beside the checkout."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"  # committed test inputs, each with the script or recipe that made it
# a small demo model (tests/conftest.py's demo_run recipe, training state dropped), written by checkpoint format 1;
# its translations of the demo test set are FIXTURES / "demo-model.{greedy,beam5,nbest3}.txt" (tests/test_golden.py)
DEMO_MODEL = FIXTURES / "demo-model.pt"
REVERSE_MODEL = FIXTURES / "reverse-model.pt"  # the demo model's recipe German->English (make_reverse_model.py)
MARIAN_MODEL = FIXTURES / "marian-en-de"  # a Hugging Face Marian model, made by fixtures/make_marian_model.py
CONFIGS = ROOT / "configs"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
# two of the model kinds `nmt export` is proven on (tests.helpers.exporting), made by fixtures/make_export_models.py
EXPORT_PRENORM = FIXTURES / "export-prenorm.pt"
EXPORT_SEPARATE = FIXTURES / "export-separate.pt"
# tiny COMET models made and scored by unbabel-comet itself (fixtures/make_comet_model.py): COMET_MODELS / NAME, and
# COMET_MODELS / "expected.json" (the triples and unbabel-comet's scores)
COMET_MODELS = FIXTURES / "comet"
