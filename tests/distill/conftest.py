"""The distillation tests' corpus: the built-in demo corpus at a size the teacher translates in a second."""

from __future__ import annotations

import pytest

from nmt.demo.files import write_demo


@pytest.fixture(scope="package")
def raw(tmp_path_factory) -> dict[str, str]:
    """Demo corpus files (train 120 / valid 10 / test 20 pairs): prefixes by split."""
    return write_demo(tmp_path_factory.mktemp("distill-raw"), n_train=120, n_valid=10, n_test=20, seed=5)
