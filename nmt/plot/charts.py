"""Pictures of a run: training curves and attention heatmaps (word alignment is nmt.translation.alignment's).

matplotlib is optional (`pip install 'nmt[plot]'`), so it is imported inside the functions that draw,
never at module level. Figures are built with
`matplotlib.figure.Figure` on an Agg canvas (no pyplot, no global backend state) at a fixed DPI, so
a PNG's pixel size is exactly figsize * DPI (`attention_figsize`, `attention_grid_figsize`,
`CURVES_FIGSIZE`). Every PNG is written atomically: a temp file in the target dir, then os.replace.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nmt.errors import NmtError
from nmt.io import atomic_write
from nmt.rundir import RunDir, read_metrics

DPI = 100  # pixels per inch of every PNG written here: pixel size = figsize * DPI
FONT = "DejaVu Sans"  # ships with matplotlib and has the SentencePiece "▁" (U+2581) glyph
# Used after DejaVu for glyphs it lacks (CJK, ...), when installed; otherwise those draw as boxes.
FALLBACK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans", "WenQuanYi Zen Hei",
                  "Droid Sans Fallback", "Arial Unicode MS")
CURVES_FIGSIZE = (12.0, 8.0)  # inches; 1200 x 800 px

# Heatmap geometry, in inches. All multiples of 1/4 so figsize * DPI is an exact integer.
CELL = 0.25  # one piece: 25 px, room for a 9 pt label
LABEL_MARGIN_W = 2.5  # y labels + colour bar
LABEL_MARGIN_H = 2.0  # rotated x labels + title
MIN_SIZE = 4.0
MAX_SIZE = 24.0  # beyond this the labels shrink (and vanish when unreadable) instead
MAX_FONT, MIN_FONT = 9.0, 4.0

PANEL_CELL, PANEL_MIN, PANEL_MAX = 0.12, 1.5, 3.0  # one head's panel in the all-heads grid
GRID_MAX_W, GRID_MAX_H = 40.0, 40.0

INSTALL_HINT = "plotting needs matplotlib: pip install 'nmt[plot]'"


def require_matplotlib() -> None:
    """Raise a one-line NmtError with the install hint when matplotlib is not importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NmtError(INSTALL_HINT) from None


# ---- shared helpers ------------------------------------------------------------------------------


def _as_array(x: Any, ndim: int, what: str) -> np.ndarray:
    """numpy / nested lists / torch tensors (any device or dtype) -> float64 array of `ndim` dims."""
    if hasattr(x, "detach"):  # torch: bf16 has no numpy dtype and CUDA memory must come home first
        x = x.detach().float().cpu()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{what} must have {ndim} dimensions, got shape {tuple(arr.shape)}")
    return np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0)


def _quarter(x: float) -> float:
    """Round up to a multiple of 1/4 inch, so that size * DPI is an exact integer."""
    return math.ceil(x * 4.0) / 4.0


@functools.cache
def _font_names() -> tuple[str, ...]:
    """DejaVu Sans, then whichever fallback fonts are installed (matplotlib falls back per glyph)."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    return (FONT, *(name for name in FALLBACK_FONTS if name in installed))


def figure_fonts() -> list[str]:
    return list(_font_names())


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, x))


def new_figure(figsize: tuple[float, float]) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # Pieces in scripts DejaVu lacks (CJK, ...) draw as boxes; one warning per glyph per PNG is noise.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph .* missing from")
        warnings.filterwarnings("ignore", message=r".*constrained_layout not applied")
        yield


def save_figure(fig: Any, out: str | Path) -> Path:
    """Write `fig` to `out` as PNG atomically; bbox_inches=None keeps the pixel size exact."""
    out = Path(out)
    try:
        with _quiet():
            atomic_write(out, lambda f: fig.savefig(f, format="png", dpi=DPI, bbox_inches=None))
    except OSError as e:
        raise NmtError(f"cannot write {out}: {e.strerror or e}") from None
    return out


# ---- training curves -----------------------------------------------------------------------------


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _series(records: list[dict[str, Any]], kind: str, key: str, positive: bool = False
            ) -> tuple[list[float], list[float]]:
    """(steps, values) of `key` in records of `kind`, skipping missing / non-finite values."""
    xs, ys = [], []
    for r in records:
        y = _number(r.get(key))
        if r["type"] == kind and y is not None and (y > 0 or not positive):
            xs.append(float(r["step"]))
            ys.append(y)
    return xs, ys


def _empty(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", color="0.4", fontsize=12)
    ax.set_xticks([])  # a 0..1 scale would suggest data
    ax.set_yticks([])


def _panel(ax: Any, records: list[dict[str, Any]], key: str, title: str, kinds: Sequence[str],
           log: bool = False, missing: str = "") -> None:
    ax.set_title(title)
    ax.set_xlabel("updates")
    drawn = False
    for kind in kinds:
        xs, ys = _series(records, kind, key, positive=log)
        if xs:
            style = {"marker": "o", "markersize": 4} if kind == "valid" else {"linewidth": 1.2}
            ax.plot(xs, ys, label=kind, **style)
            drawn = True
    if not drawn:
        _empty(ax, missing or f"no {key} logged")
        return
    if log:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    if len(kinds) > 1:
        ax.legend()


def plot_curves(run_dir: str | Path, out: str | Path) -> Path:
    """Loss, perplexity (log), valid BLEU and learning rate vs updates from `run_dir/metrics.jsonl`.

    `run_dir` may also be the metrics.jsonl file itself. Writes one 2x2 PNG of CURVES_FIGSIZE * DPI
    pixels to `out` and returns its path.
    """
    require_matplotlib()
    run_dir = Path(run_dir)
    path = run_dir if run_dir.is_file() else RunDir(run_dir).metrics_file
    records = read_metrics(path)
    if not records:
        raise NmtError(f"no train/valid records in {path}")

    fig = new_figure(CURVES_FIGSIZE)
    (loss, ppl), (bleu, lr) = fig.subplots(2, 2)
    _panel(loss, records, "loss", "loss", ("train", "valid"))
    _panel(ppl, records, "ppl", "perplexity", ("train", "valid"), log=True)
    _panel(bleu, records, "bleu", "valid BLEU", ("valid",), missing="no BLEU logged")
    _panel(lr, records, "lr", "learning rate", ("train",))
    lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))  # lrs like 7e-4 read better in sci
    name = run_dir.parent.name if run_dir.is_file() else run_dir.name
    fig.suptitle(name or str(run_dir), fontfamily=figure_fonts(), parse_math=False)
    return save_figure(fig, out)


# ---- attention heatmaps --------------------------------------------------------------------------


def attention_figsize(n_src: int, n_tgt: int) -> tuple[float, float]:
    """(width, height) in inches of `plot_attention`'s figure; the PNG is exactly that * DPI pixels.

    Grows by CELL per piece plus a fixed margin for labels and the colour bar, within
    [MIN_SIZE, MAX_SIZE] inches; every value is a multiple of 1/4 inch.
    """
    width = _clamp(LABEL_MARGIN_W + CELL * n_src, MIN_SIZE, MAX_SIZE)
    height = _clamp(LABEL_MARGIN_H + CELL * n_tgt, MIN_SIZE, MAX_SIZE)
    return _quarter(width), _quarter(height)


def label_font(extent_in: float, n: int, largest: float = MAX_FONT) -> float | None:
    """Font size (pt) that fits n labels side by side in extent_in inches; None if unreadably small."""
    if n == 0:
        return largest
    size = min(largest, 0.8 * 72.0 * extent_in / n)
    return size if size >= MIN_FONT else None


def _labels(labels: Sequence[str], n: int, what: str) -> list[str]:
    """Tick labels for a matrix dimension of n; a missing final label is the EOS the model appends."""
    labels = [str(s) for s in labels]
    if n == len(labels) + 1:
        labels.append("</s>")
    if n != len(labels):
        raise ValueError(f"{what} has {n} positions but {len(labels)} labels")
    return labels


def tick_labels(ax: Any, src: list[str], tgt: list[str], x_font: float | None, y_font: float | None) -> None:
    if x_font is None:
        ax.set_xticks([])
    else:
        ax.set_xticks(range(len(src)), src, rotation=90, fontsize=x_font, fontfamily=figure_fonts(),
                      parse_math=False)
    if y_font is None:
        ax.set_yticks([])
    else:
        ax.set_yticks(range(len(tgt)), tgt, fontsize=y_font, fontfamily=figure_fonts(), parse_math=False)


def figure_title(fig: Any, title: str, width: float, fontsize: float = 10.0) -> None:
    """A figure title (often the sentence itself) cut with "…" so it never runs off the PNG."""
    if not title:
        return
    fits = max(8, int(0.9 * width * 72.0 / (0.6 * fontsize)))  # DejaVu Sans averages ~0.6 em per char
    if len(title) > fits:
        title = title[: fits - 1] + "\u2026"
    fig.suptitle(title, fontsize=fontsize, fontfamily=figure_fonts(), parse_math=False)


def plot_attention(matrix: Any, src_labels: Sequence[str], tgt_labels: Sequence[str], out: str | Path,
                   *, title: str = "") -> Path:
    """Heatmap of a [T, S] attention matrix: rows = target pieces, columns = source pieces.

    The matrix may be one longer than the labels in either dimension (the EOS the model adds); that
    row/column is labelled "</s>". The PNG is attention_figsize(S, T) * DPI pixels.
    """
    require_matplotlib()
    m = _as_array(matrix, 2, "attention matrix")
    if m.size == 0:
        raise ValueError(f"attention matrix is empty: shape {tuple(m.shape)}")
    tgt, src = _labels(tgt_labels, m.shape[0], "target axis"), _labels(src_labels, m.shape[1], "source axis")
    width, height = attention_figsize(len(src), len(tgt))
    fig = new_figure((width, height))
    ax = fig.subplots()
    image = ax.imshow(m, aspect="auto", cmap="viridis", vmin=0.0, interpolation="nearest")
    tick_labels(ax, src, tgt, label_font(width - LABEL_MARGIN_W, len(src)),
           label_font(height - LABEL_MARGIN_H, len(tgt)))
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    fig.colorbar(image, ax=ax, fraction=min(0.05, 0.3 / width), pad=0.02)  # at most ~0.3 in wide
    figure_title(fig, title, width)
    return save_figure(fig, out)


def attention_grid_figsize(n_layers: int, n_heads: int, n_src: int, n_tgt: int) -> tuple[float, float]:
    """(width, height) in inches of `plot_attention_grid`'s figure (PNG = that * DPI pixels)."""
    panel_w = _clamp(PANEL_CELL * n_src, PANEL_MIN, PANEL_MAX)
    panel_h = _clamp(PANEL_CELL * n_tgt, PANEL_MIN, PANEL_MAX)
    width = _clamp(n_heads * panel_w + LABEL_MARGIN_W, MIN_SIZE, GRID_MAX_W)
    height = _clamp(n_layers * panel_h + LABEL_MARGIN_H, MIN_SIZE, GRID_MAX_H)
    return _quarter(width), _quarter(height)


def plot_attention_grid(attn: Any, src_labels: Sequence[str], tgt_labels: Sequence[str], out: str | Path,
                        *, title: str = "") -> Path:
    """Every head of every layer: attn [L, H, T, S] -> an L x H grid of heatmaps on one colour scale.

    Panels are titled "layer l head h" (0-based, as `--attention-layer` counts). Piece labels appear only
    on the left column and bottom row, and not at all when the panels are too small to read them.
    """
    require_matplotlib()
    a = _as_array(attn, 4, "attention grid")
    if a.size == 0:
        raise ValueError(f"attention grid is empty: shape {tuple(a.shape)}")
    n_layers, n_heads, n_tgt, n_src = a.shape
    tgt, src = _labels(tgt_labels, n_tgt, "target axis"), _labels(src_labels, n_src, "source axis")
    width, height = attention_grid_figsize(n_layers, n_heads, n_src, n_tgt)
    fig = new_figure((width, height))
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    x_font = label_font((width - LABEL_MARGIN_W) / max(n_heads, 1), n_src, largest=7.0)
    y_font = label_font((height - LABEL_MARGIN_H) / max(n_layers, 1), n_tgt, largest=7.0)
    vmax = float(a.max()) if a.max() > 0 else 1.0
    image = None
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            image = ax.imshow(a[layer, head], aspect="auto", cmap="viridis", vmin=0.0, vmax=vmax,
                              interpolation="nearest")
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
            tick_labels(ax, src, tgt, x_font if layer == n_layers - 1 else None, y_font if head == 0 else None)
    if image is not None:
        fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01)
    figure_title(fig, title, width)
    return save_figure(fig, out)
