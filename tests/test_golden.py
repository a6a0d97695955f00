"""Golden outputs: `nmt translate` on a fixed checkpoint must print exactly what it printed before.

Guards against refactors (search, model, tokenizer, checkpoint loading, output formatting) silently changing
translations: tests/fixtures/demo-model.pt is a small demo model (conftest's demo_run recipe, training state
dropped), and tests/fixtures/demo-model.{greedy,beam5,nbest3}.txt are its translations of the demo test set
(write_demo(..., seed=3), regenerated here) as the code printed them when they were made. Byte-identical, except the
printed log-probabilities of --scores.

To accept a deliberate change of output, regenerate the golden files with the new code and review the diff:
    NMT_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden.py
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from nmt.demo.files import write_demo
from tests.helpers.cli import run_cli
from tests.helpers.golden import CHECKPOINT, DATA, MODES, SOURCE_SHA256, first_difference, same_scored_lines

UPDATE = os.environ.get("NMT_UPDATE_GOLDEN") == "1"
# sha256 of the regenerated test.en the golden files translate: a mismatch means nmt.demo.german changed, not translate
# the last printed digit of a score can flip on another CPU's fp32 kernels, so scores get a tolerance


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    raw = write_demo(tmp_path_factory.mktemp("golden-raw"), n_train=2000, n_valid=100, n_test=100, seed=3)
    path = Path(raw["test"] + ".en")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == SOURCE_SHA256, (
        f"the demo test set changed (sha256 {digest}): the golden outputs translate another input; if nmt.demo.german "
        "changed on purpose, update SOURCE_SHA256 and regenerate the golden files (see the module docstring)")
    return path


def translate(source: Path, out: Path, options: list[str]) -> bytes:
    args = ["translate", "--checkpoint", str(CHECKPOINT), "--dtype", "fp32", *options, "--threads", "1",
            "--no-progress", "--input", str(source), "--output", str(out)]
    result = run_cli(*args)
    assert result.exit_code == 0, f"nmt {' '.join(args)}: exit {result.exit_code}\n{result.output[-3000:]}"
    return out.read_bytes()


@pytest.mark.parametrize("mode", list(MODES))
def test_translate_output_matches_golden(mode, source, tmp_path):
    golden = DATA / f"demo-model.{mode}.txt"
    got = translate(source, tmp_path / f"{mode}.txt", MODES[mode])
    if UPDATE:
        golden.write_bytes(got)
        return
    want = golden.read_bytes()
    if mode == "nbest3":
        problem = same_scored_lines(got.decode("utf-8"), want.decode("utf-8"))
        assert problem is None, f"{golden.name}: {problem}"
    else:
        assert got == want, f"{golden.name}: " + first_difference(got.decode("utf-8", "replace").split("\n"),
                                                                  want.decode("utf-8", "replace").split("\n"))
