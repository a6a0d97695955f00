"""Pictures of the paper's mechanisms for `nmt plot --kind`: the sinusoidal positional encodings (§3.5), the
padding and causal attention masks (§3.2.3), the learning-rate schedule (§5.3, eq. 3) and the label-smoothed
target distribution (§5.4), each of a real config or checkpoint.

Every picture is computed first (`positions`, `masks`, `schedule`, `smoothing`: numbers from the functions the
model and the training use, never a re-implementation) and drawn second (`draw_*`), so what a PNG shows can be
checked as numbers. Drawing follows nmt.plot.charts: matplotlib imported inside the functions, a Figure on an Agg canvas
at a fixed DPI (a PNG is exactly FIGSIZES[kind] * DPI pixels), written atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.config.experiment import Config, ModelConfig, apply_dict, load_config, parse_overrides
from nmt.errors import NmtError
from nmt.plot import charts
from nmt.plot.charts import require_matplotlib

KINDS = ("positions", "masks", "schedule", "smoothing")
ALL_KINDS = ("curves", *KINDS, "all")
FIGSIZES = {"positions": (14.0, 6.0), "masks": (18.0, 7.0), "schedule": (14.0, 5.5), "smoothing": (14.0, 5.5)}
CURVE_POSITIONS = 100  # the sin/cos curves span this many positions: several periods of the dimensions drawn
EXAMPLE_SENTENCES = ("The cat sat on the mat.", "Attention is all you need.", "Good morning!",
                     "Where is the train station, please?")
EXAMPLE_LENGTHS = (6, 3, 9, 5)  # the batch drawn without a tokenizer: tokens per sentence
EXAMPLE_ID = 4  # the token id of that batch, and the smoothing picture's target: the first id after the specials
SCHEDULE_POINTS = 1000  # learning_rate calls per panel spacing (linear and geometric)
SMOOTHING_SHOWN = 12  # vocabulary ids drawn as bars (the rest hold eps / V each, as the picture says)
ATTEND, MASKED = "#2b7bba", "#e0e0e0"  # True = may attend, False = masked


# ---- what the pictures are of --------------------------------------------------------------------


@dataclass
class Source:
    """A config, and the checkpoint it came from (its tokenizer and target vocabulary), if any."""

    cfg: Config
    name: str
    checkpoint: Any = None  # nmt.checkpoint.Checkpoint


def load_source(config: Path | None, overrides: Sequence[str], checkpoint: Path | None,
                run_dir: Path | None = None) -> Source:
    """--checkpoint (a file or run dir: its saved config) or --config, then --set; with neither, RUN_DIR's
    checkpoint, else its config.yaml, else the defaults."""
    from nmt.rundir import RunDir, checkpoint_file

    if config is not None and checkpoint is not None:
        raise NmtError("give --config or --checkpoint, not both (--set changes a checkpoint's settings)")
    if config is None and checkpoint is None and run_dir is not None:
        run = RunDir(run_dir)
        if any(p.is_file() for p in (run.averaged, run.best, run.last)):
            checkpoint = run_dir
        elif run.config_file.is_file():
            config = run.config_file
        else:
            raise NmtError(f"{run_dir}: no checkpoint and no config.yaml (pass --config or --checkpoint)")
    if checkpoint is None:
        return Source(load_config(config, list(overrides)), str(config) if config else "default config")
    from nmt import checkpoint as ckpt

    path = checkpoint_file(checkpoint)
    state = ckpt.load(path, mmap=True)  # mapped: the weights are never needed
    cfg = state.config
    if overrides:
        apply_dict(cfg, parse_overrides(list(overrides)), origin="--set")
    return Source(cfg, str(path), state)


# ---- §3.5 positional encodings -------------------------------------------------------------------


@dataclass(frozen=True)
class Positions:
    """PE [max_positions, d_model], what the model adds to its embeddings, and the columns drawn as curves."""

    pe: np.ndarray
    layout: str
    curves: tuple[tuple[int, str], ...]  # (column of pe, legend label)


def positions(model: ModelConfig) -> Positions:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) by nmt.model.sinusoidal_positions
    (the "halves" layout puts all sines first). Curves: sin and cos of i = d/16, d/8, d/4, whose wavelengths
    2π·10000^(2i/d) (~20, ~63, ~628 positions at any d_model) show the frequencies falling along the dimensions."""
    from nmt.model import sinusoidal_positions

    d, layout = model.d_model, model.position_layout
    pe = sinusoidal_positions(model.max_positions, d, layout).double().numpy()
    curves: list[tuple[int, str]] = []
    for i in sorted({d // 16, d // 8, d // 4}):
        sin, cos = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, (d + 1) // 2 + i)
        curves += [(c, f"dim {c}: {f}(pos / 10000^({2 * i}/{d}))") for c, f in ((sin, "sin"), (cos, "cos")) if c < d]
    return Positions(pe, layout, tuple(curves))


def draw_positions(p: Positions, out: Path, title: str) -> Path:
    require_matplotlib()
    fig = charts.new_figure(FIGSIZES["positions"])
    heat, lines = fig.subplots(1, 2, width_ratios=[1.0, 1.2])
    image = heat.imshow(p.pe, aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    heat.set(xlabel="dimension", ylabel="position", title=f"PE matrix, {p.layout} sin/cos")
    fig.colorbar(image, ax=heat, fraction=0.05, pad=0.02)
    n = min(CURVE_POSITIONS, len(p.pe))
    for k, (column, label) in enumerate(p.curves):  # a sin/cos pair shares a colour: one frequency
        lines.plot(np.arange(n), p.pe[:n, column], color=f"C{k // 2}", linestyle="-" if k % 2 == 0 else "--",
                   label=label)
    lines.set(xlabel="position", ylabel="PE(pos, dim)", title=f"a few dimensions over the first {n} positions")
    lines.grid(True, alpha=0.3)
    lines.legend(fontsize=8, loc="lower left")
    charts.figure_title(fig, f"§3.5 sinusoidal positional encoding: {title}", FIGSIZES["positions"][0], 11.0)
    return charts.save_figure(fig, out)


# ---- §3.2.3 masks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Masks:
    """Boolean masks of one batch, True = may attend. padding [B, S]: the keys of encoder self-attention and of
    cross-attention (source pieces + </s>, right-padded); causal [T, T]: decoder self-attention, query t sees
    keys 0..t. `row`: the sentence whose encoder self-attention mask [S, S] is drawn (the most padded)."""

    padding: np.ndarray
    causal: np.ndarray
    src_labels: tuple[tuple[str, ...], ...]  # per sentence: pieces + "</s>"
    tgt_labels: tuple[str, ...]  # the longest decoder input: "<s>" + pieces
    row: int


def masks(tokenizer: Any | None, sentences: Sequence[str] = ()) -> Masks:
    """§3.2.3: the masks of a batch padded by nmt.data.batching.collate, as training pads it. With a tokenizer the
    sentences (default EXAMPLE_SENTENCES) are its pieces; without, `sentences` split at spaces, else a batch
    of EXAMPLE_LENGTHS tokens."""
    from nmt.data.batching import collate
    from nmt.tokenizer import NMT_IDS

    if tokenizer is not None:
        lines = list(sentences or EXAMPLE_SENTENCES)
        src, tgt, ids = tokenizer.encode_src(lines), tokenizer.encode_tgt(lines), tokenizer.special_ids
        src_pieces, tgt_pieces = [tokenizer.src_id_pieces(s) for s in src], [tokenizer.tgt_pieces(t) for t in tgt]
    else:
        words = [s.split() for s in sentences] or [[f"w{i + 1}" for i in range(n)] for n in EXAMPLE_LENGTHS]
        src = tgt = [[EXAMPLE_ID] * len(w) for w in words]
        src_pieces = tgt_pieces = words
        ids = NMT_IDS
    batch = collate(src, tgt, pad=ids.pad, bos=ids.bos, eos=ids.eos)
    padding = batch.src.ne(ids.pad).numpy()  # the model's rule (Transformer.encode): a key is padding iff pad
    width = batch.tgt_in.size(1)
    causal = (~torch.ones(width, width, dtype=torch.bool).triu(1)).numpy()  # the future: above the diagonal
    longest = max(range(len(tgt)), key=lambda b: len(tgt[b]))
    return Masks(padding, causal, tuple((*map(str, p), "</s>") for p in src_pieces),
                 ("<s>", *map(str, tgt_pieces[longest])), int(padding.sum(1).argmin()))


def _mask_panel(ax: Any, mask: np.ndarray, title: str, x_labels: Sequence[str], y_labels: Sequence[str],
                width_in: float, xlabel: str, ylabel: str) -> None:
    from matplotlib.colors import ListedColormap

    ax.imshow(mask.astype(float), cmap=ListedColormap([MASKED, ATTEND]), vmin=0.0, vmax=1.0,
              interpolation="nearest", aspect="auto")
    ax.set_title(title, fontsize=10)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    rows, cols = mask.shape  # white cell borders (lines: minor ticks would cost a label layout each)
    ax.vlines(np.arange(cols + 1) - 0.5, -0.5, rows - 0.5, color="white", linewidth=1.0)
    ax.hlines(np.arange(rows + 1) - 0.5, -0.5, cols - 0.5, color="white", linewidth=1.0)
    x_font, y_font = charts.label_font(width_in, len(x_labels)), charts.label_font(4.5, len(y_labels))
    charts.tick_labels(ax, list(x_labels), list(y_labels), x_font, y_font)


def draw_masks(m: Masks, out: Path, title: str) -> Path:
    require_matplotlib()
    from matplotlib.patches import Patch

    fig = charts.new_figure(FIGSIZES["masks"])
    batch_ax, encoder_ax, causal_ax = fig.subplots(1, 3)
    n, width = m.padding.shape
    panel_w = FIGSIZES["masks"][0] / 3 - 1.5
    _mask_panel(batch_ax, m.padding, f"padding mask [B={n}, S={width}]: keys of encoder self- and cross-attention",
                [str(i) for i in range(width)], [f"sentence {b} ({len(s)})" for b, s in enumerate(m.src_labels)],
                panel_w, "key position", "")
    # rotated: ~3 chars tall
    font = min(charts.label_font(panel_w, width) or 0.0, charts.label_font(5.0, 3 * n) or 0.0, 7.0)
    for b, pieces in enumerate(m.src_labels):  # each sentence's pieces in its cells, when they fit
        for s, piece in enumerate(pieces if font else ()):
            batch_ax.text(s, b, piece, ha="center", va="center", rotation=90, fontsize=font, color="white",
                          fontfamily=charts.figure_fonts(), parse_math=False)
    labels = (*m.src_labels[m.row], *["<pad>"] * (width - len(m.src_labels[m.row])))
    _mask_panel(encoder_ax, np.broadcast_to(m.padding[m.row], (width, width)),
                f"sentence {m.row}: encoder self-attention [S, S]", labels, labels, panel_w, "key", "query")
    _mask_panel(causal_ax, m.causal, f"causal (look-ahead) mask [T={len(m.causal)}, T]: decoder self-attention",
                m.tgt_labels, m.tgt_labels, panel_w, "key (decoder input)", "query")
    fig.legend(handles=[Patch(color=ATTEND, label="True: may attend"),
                        Patch(color=MASKED, label="False: masked (score set to -inf before the softmax)")],
               loc="outside lower center", ncol=2)
    charts.figure_title(fig, f"§3.2.3 attention masks: {title}", FIGSIZES["masks"][0], 11.0)
    return charts.save_figure(fig, out)


# ---- §5.3 learning-rate schedule -----------------------------------------------------------------

FORMULAS = {"noam": "lr · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)  (eq. 3, lr a scale factor)",
            "inverse_sqrt": "linear warmup from warmup_init_lr to lr, then lr · sqrt(warmup / step)"}


@dataclass(frozen=True)
class Schedule:
    """nmt.train.optim.learning_rate at the updates `steps` (1-based, sorted)."""

    steps: np.ndarray
    lr: np.ndarray
    name: str
    warmup: int
    max_updates: int

    @property
    def peak(self) -> tuple[int, float]:
        k = int(self.lr.argmax())
        return int(self.steps[k]), float(self.lr[k])


def schedule(cfg: Config) -> Schedule:
    """§5.3, eq. 3: the config's schedule over its train.max_updates (at least twice the warmup), at steps spaced
    both linearly and geometrically (for the log-log panel), the warmup step among them."""
    from nmt.train.optim import learning_rate

    t = cfg.train
    last = t.max_updates if t.max_updates > t.warmup else max(2 * t.warmup, 2)  # the whole warmup, and after it
    grid = np.concatenate([np.linspace(1, last, SCHEDULE_POINTS), np.geomspace(1, last, SCHEDULE_POINTS),
                           [max(t.warmup, 1)]])
    steps = np.unique(grid.round().astype(np.int64))
    lr = np.array([learning_rate(int(s), cfg) for s in steps])
    return Schedule(steps, lr, t.schedule, t.warmup, t.max_updates)


def draw_schedule(s: Schedule, out: Path, title: str) -> Path:
    require_matplotlib()
    fig = charts.new_figure(FIGSIZES["schedule"])
    peak_step, peak_lr = s.peak
    for ax, log in zip(fig.subplots(1, 2), (False, True), strict=True):
        ax.plot(s.steps, s.lr, color="C0", label=s.name)
        if s.warmup > 0:
            ax.axvline(s.warmup, color="C1", linestyle="--", label=f"warmup = {s.warmup} updates")
        if 0 < s.max_updates < s.steps[-1]:
            ax.axvline(s.max_updates, color="0.4", linestyle=":", label=f"max_updates = {s.max_updates}")
        ax.plot([peak_step], [peak_lr], "o", color="C3", label=f"peak {peak_lr:.3g} at update {peak_step}")
        ax.set(xlabel="update (step)", ylabel="learning rate", title="log-log: slope -1/2 after warmup" if log
               else "learning rate per update")
        if log:
            ax.set(xscale="log", yscale="log")
        else:
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.grid(True, alpha=0.3, which="both" if log else "major")
        ax.legend(fontsize=9)
    charts.figure_title(fig, f"§5.3 {s.name}: {FORMULAS.get(s.name, '')}  [{title}]", FIGSIZES["schedule"][0], 11.0)
    return charts.save_figure(fig, out)


# ---- §5.4 label smoothing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Smoothing:
    """One target token's distribution over the vocabulary [V]: one-hot, and as the loss smooths it."""

    target: int
    epsilon: float
    one_hot: np.ndarray
    smoothed: np.ndarray
    shown: np.ndarray  # the ids drawn as bars
    labels: tuple[str, ...]  # their pieces (or ids)
    vocab_from: str


def smoothing(epsilon: float, vocab: int, target: int, pieces: Sequence[str] | None = None,
              vocab_from: str = "") -> Smoothing:
    """§5.4: nmt.loss.smoothed_targets, q = (1 - eps) onehot + eps / V (the rule label_smoothed_loss applies).
    `pieces`: the labels of the ids drawn (the ids themselves without)."""
    from nmt.loss import smoothed_targets

    if vocab < 2 or not 0 <= target < vocab:
        raise NmtError(f"label smoothing needs a vocabulary of >= 2 ids holding the target, got V={vocab}")
    q = smoothed_targets(torch.tensor(target), vocab, epsilon, dtype=torch.float64).numpy()
    one_hot = smoothed_targets(torch.tensor(target), vocab, 0.0, dtype=torch.float64).numpy()
    shown = np.array(sorted(set(range(min(vocab, SMOOTHING_SHOWN - 1))) | {target}))
    labels = tuple(pieces) if pieces is not None else tuple(f"id {i}" for i in shown)
    return Smoothing(target, epsilon, one_hot, q, shown, labels, vocab_from)


def draw_smoothing(s: Smoothing, out: Path, title: str) -> Path:
    require_matplotlib()
    fig = charts.new_figure(FIGSIZES["smoothing"])
    linear, log = fig.subplots(1, 2)
    x, vocab, hit = np.arange(len(s.shown)), len(s.smoothed), int(np.flatnonzero(s.shown == s.target)[0])
    linear.bar(x - 0.2, s.one_hot[s.shown], width=0.4, color="0.6", label="one-hot (label_smoothing 0)")
    linear.bar(x + 0.2, s.smoothed[s.shown], width=0.4, color="C0", label=f"smoothed, ε = {s.epsilon:g}")
    linear.annotate(f"1 - ε + ε/V = {s.smoothed[s.target]:.6g}", (hit + 0.2, s.smoothed[s.target]),
                    xytext=(0.5, 0.6), textcoords="axes fraction", ha="center", fontsize=10,
                    arrowprops={"arrowstyle": "->", "color": "0.3"})
    linear.set(ylim=(0, 1.12), ylabel="target probability", title="one-hot vs label-smoothed target")
    log.bar(x, s.smoothed[s.shown], color="C0")
    if s.epsilon > 0:
        log.set(yscale="log", ylim=(s.epsilon / vocab / 10, 2.0))  # bars of eps / V stand tall enough to see
        log.axhline(s.epsilon / vocab, color="C1", linestyle="--",
                    label=f"ε/V = {s.epsilon / vocab:.3g} on each of the {vocab - 1} other ids (specials too)")
        log.legend(fontsize=9, loc="center right")
    log.set(ylabel="target probability (log)", title=f"smoothed, all {vocab} ids sum to {s.smoothed.sum():.6g}")
    for ax in (linear, log):
        ax.set_xticks(x, s.labels, rotation=90, fontfamily=charts.figure_fonts(), parse_math=False)
        ax.get_xticklabels()[hit].set_color("C3")  # the target token
        ax.set_xlabel(f"first vocabulary ids and the target ({vocab - len(x)} more not drawn)")
    linear.legend(fontsize=9, loc="upper left")
    charts.figure_title(fig, f"§5.4 label smoothing ε = {s.epsilon:g}, V = {vocab} ({s.vocab_from}): {title}",
           FIGSIZES["smoothing"][0], 11.0)
    return charts.save_figure(fig, out)


# ---- `nmt plot` ----------------------------------------------------------------------------------


def _smoothing_of(source: Source, sentences: Sequence[str], vocab_size: int | None) -> Smoothing:
    """The config's label_smoothing over V = --vocab-size, else the checkpoint's target vocabulary, else
    data.vocab_size; the target token: the first target piece of the first sentence (with a tokenizer)."""
    tokenizer = source.checkpoint.tokenizer() if source.checkpoint is not None else None
    if vocab_size is not None:
        vocab, vocab_from = vocab_size, "--vocab-size"
    elif source.checkpoint is not None:
        vocab, vocab_from = source.checkpoint.vocab_sizes[1], "the checkpoint's target vocabulary"
    else:
        vocab, vocab_from = source.cfg.data.vocab_size, "data.vocab_size"
    target, pieces = min(EXAMPLE_ID, vocab - 1), None
    if tokenizer is not None and vocab == tokenizer.tgt_vocab_size:
        first = tokenizer.encode_tgt([(list(sentences) or list(EXAMPLE_SENTENCES))[0]])[0]
        target = first[0] if first else tokenizer.special_ids.eos
        shown = sorted(set(range(min(vocab, SMOOTHING_SHOWN - 1))) | {target})
        pieces = tokenizer.tgt_pieces(shown)
    return smoothing(source.cfg.train.label_smoothing, vocab, target, pieces, vocab_from)


def compute(kind: str, source: Source, sentences: Sequence[str] = (), vocab_size: int | None = None) -> Any:
    """The numbers of picture `kind` (one of KINDS) of `source`."""
    if kind == "positions":
        return positions(source.cfg.model)
    if kind == "masks":
        return masks(source.checkpoint.tokenizer() if source.checkpoint is not None else None, sentences)
    if kind == "schedule":
        return schedule(source.cfg)
    return _smoothing_of(source, sentences, vocab_size)


DRAW = {"positions": draw_positions, "masks": draw_masks, "schedule": draw_schedule, "smoothing": draw_smoothing}


def _outputs(kind: str, run_dir: Path | None, output: Path | None) -> dict[str, Path]:
    """kind -> PNG: --output (a file; a directory gets KIND.png; with `all` a directory), else RUN_DIR/KIND.png,
    else ./KIND.png. `all` includes curves only with a RUN_DIR."""
    if kind not in ALL_KINDS:
        raise NmtError(f"--kind must be one of {'|'.join(ALL_KINDS)}, got '{kind}'")
    if kind == "curves" and run_dir is None:
        raise NmtError("--kind curves needs RUN_DIR (a run dir holding metrics.jsonl)")
    if kind == "all":
        if output is not None and (output.is_file() or output.suffix.lower() == ".png"):
            raise NmtError(f"--kind all writes one PNG per kind: --output must be a directory, got {output}")
        where = output or run_dir or Path(".")
        kinds = (("curves",) if run_dir is not None else ()) + KINDS
        return {k: where / f"{k}.png" for k in kinds}
    if output is not None:
        return {kind: output / f"{kind}.png" if output.is_dir() else output}
    return {kind: (run_dir or Path(".")) / f"{kind}.png"}


def run(kind: str, run_dir: Path | None, output: Path | None, *, config: Path | None = None,
        overrides: Sequence[str] = (), checkpoint: Path | None = None, sentences: Sequence[str] = (),
        vocab_size: int | None = None) -> list[Path]:
    """`nmt plot`: write the picture(s) of `kind`; returns the PNGs written."""
    outputs = _outputs(kind, run_dir, output)
    if vocab_size is not None and vocab_size < 2:
        raise NmtError(f"--vocab-size must be >= 2, got {vocab_size}")
    curves = outputs.pop("curves", None)
    if outputs:  # the source first: a mistake in it is refused before any PNG is written
        require_matplotlib()  # and before loading a checkpoint for nothing
        source = load_source(config, overrides, checkpoint, run_dir)
    written = []
    if curves is not None:
        from nmt.plot.charts import plot_curves

        written.append(plot_curves(run_dir, curves))
    for name, out in outputs.items():
        written.append(DRAW[name](compute(name, source, sentences, vocab_size), out, source.name))
    return written
