"""Plots (curves, attention heatmaps, grids); word alignment is tests/test_alignment.py's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from nmt.errors import NmtError
from nmt.plot import charts as plot
from nmt.plot.charts import (
    CURVES_FIGSIZE,
    DPI,
    attention_figsize,
    attention_grid_figsize,
    plot_attention,
    plot_attention_grid,
    plot_curves,
    require_matplotlib,
)
from nmt.rundir import read_metrics
from tests.helpers.plotting import pixels, png_size, write_metrics


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


# ---- curves ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bleu", [True, False])
def test_plot_curves_writes_png_of_expected_size(tmp_path: Path, bleu: bool) -> None:
    run = tmp_path / "run"
    write_metrics(run, bleu=bleu)
    out = plot_curves(run, tmp_path / "figs" / "curves.png")
    assert out == tmp_path / "figs" / "curves.png"
    assert out.stat().st_size > 10_000  # four panels of real content, not an empty canvas
    assert png_size(out) == pixels(CURVES_FIGSIZE)
    assert no_temp_files(out.parent)


def test_read_metrics_skips_malformed_and_sorts(tmp_path: Path) -> None:
    write_metrics(tmp_path)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 20 + 4
    assert [r["step"] for r in records] == sorted(r["step"] for r in records)
    assert {r["type"] for r in records} == {"train", "valid"}


def test_plot_curves_accepts_metrics_file_path(tmp_path: Path) -> None:
    write_metrics(tmp_path / "run")
    out = plot_curves(tmp_path / "run" / "metrics.jsonl", tmp_path / "c.png")
    assert png_size(out) == pixels(CURVES_FIGSIZE)


def test_plot_curves_missing_or_empty_is_user_error(tmp_path: Path) -> None:
    with pytest.raises(NmtError, match="no metrics file") as e:
        plot_curves(tmp_path / "nope", tmp_path / "c.png")
    assert "\n" not in str(e.value)
    (tmp_path / "metrics.jsonl").write_text('garbage\n{"type": "other", "step": 1}\n', encoding="utf-8")
    with pytest.raises(NmtError, match="no train/valid records"):
        plot_curves(tmp_path, tmp_path / "c.png")
    assert not (tmp_path / "c.png").exists()


def test_plot_curves_only_valid_records(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"type": "valid", "step": 100, "loss": 3.0, "nll": 2.9, "ppl": 18.2}) + "\n",
        encoding="utf-8")
    assert png_size(plot_curves(tmp_path, tmp_path / "c.png")) == pixels(CURVES_FIGSIZE)


def test_require_matplotlib_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require_matplotlib()  # installed here
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    with pytest.raises(NmtError) as e:
        require_matplotlib()
    assert str(e.value) == "plotting needs matplotlib: pip install 'nmt[plot]'"
    write_metrics(tmp_path)
    with pytest.raises(NmtError, match="nmt\\[plot\\]"):
        plot_curves(tmp_path, tmp_path / "c.png")


# ---- attention heatmaps ------------------------------------------------------------------------

SRC = ["▁The", "▁cat", "▁sat", "▁on", "▁the", "▁mat", "."]
TGT = ["▁Die", "▁Katze", "▁saß", "▁auf", "▁der", "▁Matte", "."]


def test_attention_figsize_grows_and_is_capped() -> None:
    small, big, huge = attention_figsize(2, 2), attention_figsize(30, 10), attention_figsize(1000, 1000)
    assert small[0] <= big[0] and small[1] <= big[1]
    assert big[0] > big[1]  # wider for more source pieces
    assert huge == (plot.MAX_SIZE, plot.MAX_SIZE)
    for size in (small, big, huge, attention_figsize(7, 13)):
        assert all(float(v * DPI).is_integer() for v in size)


def test_plot_attention_png_size(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    m = rng.dirichlet(np.ones(len(SRC) + 1), size=len(TGT) + 1)  # + EOS row/column, labelled "</s>"
    out = plot_attention(m, SRC, TGT, tmp_path / "a.png", title="The cat sat on the mat. $5 $x$")
    assert png_size(out) == pixels(attention_figsize(len(SRC) + 1, len(TGT) + 1))
    assert no_temp_files(tmp_path)


def test_plot_attention_accepts_tensor_like(tmp_path: Path) -> None:
    class FakeTensor:  # what nmt hands over: a torch tensor with .detach().float().cpu()
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def detach(self) -> FakeTensor:
            return self

        def float(self) -> FakeTensor:
            return FakeTensor(self.a.astype(np.float32))

        def cpu(self) -> FakeTensor:
            return self

        def __array__(self, dtype=None, copy=None) -> np.ndarray:
            return self.a if dtype is None else self.a.astype(dtype)

    out = plot_attention(FakeTensor(np.eye(3)), ["▁a", "b", "▁c"], ["▁x", "▁y", "z"], tmp_path / "t.png")
    assert png_size(out) == pixels(attention_figsize(3, 3))


def test_plot_attention_label_mismatch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="source axis"):
        plot_attention(np.ones((2, 5)), ["▁a"], ["▁x", "▁y"], tmp_path / "x.png")


def test_plot_attention_long_sentence_is_capped(tmp_path: Path) -> None:
    n = 150
    src, tgt = [f"▁w{i}" for i in range(n)], [f"▁v{i}" for i in range(n)]
    out = plot_attention(np.eye(n), src, tgt, tmp_path / "l.png")
    assert png_size(out) == pixels((plot.MAX_SIZE, plot.MAX_SIZE))


def test_plot_attention_grid_png_size(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    attn = rng.dirichlet(np.ones(len(SRC)), size=(2, 4, len(TGT)))  # [L, H, T, S]
    out = plot_attention_grid(attn, SRC, TGT, tmp_path / "grid.png", title="all heads")
    assert png_size(out) == pixels(attention_grid_figsize(2, 4, len(SRC), len(TGT)))
    with pytest.raises(ValueError, match="4 dimensions"):
        plot_attention_grid(attn[0], SRC, TGT, tmp_path / "bad.png")


def test_unwritable_output_is_user_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NmtError, match="file is not a directory"):  # a path under a regular file
        plot_attention(np.eye(2), ["▁a", "▁b"], ["▁x", "▁y"], tmp_path / "file" / "a.png")
