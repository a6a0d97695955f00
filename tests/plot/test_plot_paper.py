"""`nmt plot --kind positions|masks|schedule|smoothing|all`: the paper's pictures of real configs (configs/*.yaml)
and a real checkpoint (tests/fixtures/demo-model.pt), made through the CLI. Each test checks the PNG's pixel size and
the numbers drawn: the spy fixture `drawn` keeps what nmt.plot.paper.compute returned and the Figure saved."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nmt import checkpoint as ckpt
from nmt.config.experiment import load_config
from nmt.data.batching import collate
from nmt.loss import label_smoothed_loss
from nmt.model import sinusoidal_positions
from nmt.plot import charts
from nmt.plot import paper as plot_paper
from nmt.plot.charts import CURVES_FIGSIZE
from nmt.train.optim import learning_rate
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.paths import DEMO_MODEL, ROOT
from tests.helpers.plotting import pixels, png_size, write_metrics

TINY, BASE = ROOT / "configs" / "tiny.yaml", ROOT / "configs" / "base.yaml"
LINES = ["Good morning!", "The cat sat on the mat.", "Where is the train station, please?"]


class Drawn:
    """What the CLI drew, by kind: the numbers (`data`) and the matplotlib Figure saved (`figure`)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.figure: dict[str, Any] = {}
        self.last = ""


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Drawn:
    seen, compute, save = Drawn(), plot_paper.compute, charts.save_figure

    def spy_compute(kind: str, *args: Any, **kwargs: Any) -> Any:
        seen.last, seen.data[kind] = kind, compute(kind, *args, **kwargs)
        return seen.data[kind]

    def spy_save(fig: Any, out: Path) -> Path:
        seen.figure[seen.last] = fig  # run() draws each kind right after computing it
        return save(fig, out)

    monkeypatch.setattr(plot_paper, "compute", spy_compute)
    monkeypatch.setattr(charts, "save_figure", spy_save)
    return seen


def plot(*args: str | Path, out: Path) -> Path:
    result = run_cli("plot", *args, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {out}" in result.stderr
    return out


def assert_png(path: Path, kind: str) -> None:
    assert png_size(path) == pixels(plot_paper.FIGSIZES[kind])
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # written atomically


# ---- §3.5 positional encodings -------------------------------------------------------------------


@pytest.mark.parametrize("config, layout", [(TINY, "interleaved"), (BASE, "interleaved"), (TINY, "halves")])
def test_positions_are_the_sinusoids(tmp_path: Path, drawn: Drawn, config: Path, layout: str) -> None:
    out = plot("--kind", "positions", "-c", config, "--set", f"model.position_layout={layout}",
               out=tmp_path / "pe.png")
    assert_png(out, "positions")
    model = load_config(config).model
    p, fig = drawn.data["positions"], drawn.figure["positions"]
    d = model.d_model
    assert p.pe.shape == (model.max_positions, d)
    np.testing.assert_array_equal(p.pe, sinusoidal_positions(model.max_positions, d, layout).numpy())
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), p.pe)  # the heatmap is the matrix
    pos = np.arange(model.max_positions)
    half = (d + 1) // 2
    for k, (column, label) in enumerate(p.curves):
        i = column // 2 if layout == "interleaved" else column % half
        is_sin = column % 2 == 0 if layout == "interleaved" else column < half
        expected = (np.sin if is_sin else np.cos)(pos / 10000 ** (2 * i / d))  # §3.5, written out here
        np.testing.assert_allclose(p.pe[:, column], expected, atol=2e-6)
        assert label.startswith(f"dim {column}: {'sin' if is_sin else 'cos'}")
        line = fig.axes[1].lines[k].get_ydata()
        np.testing.assert_array_equal(line, p.pe[: len(line), column])
    assert len(p.curves) == 6


# ---- §5.3 learning-rate schedule -----------------------------------------------------------------


@pytest.mark.parametrize("config", [TINY, BASE])
def test_schedule_is_learning_rate(tmp_path: Path, drawn: Drawn, config: Path) -> None:
    assert_png(plot("-k", "schedule", "-c", config, out=tmp_path / "lr.png"), "schedule")
    cfg, s = load_config(config), drawn.data["schedule"]
    t = cfg.train
    assert (s.name, s.warmup, s.steps[0], s.steps[-1]) == (t.schedule, t.warmup, 1, t.max_updates)
    np.testing.assert_array_equal(s.lr, [learning_rate(int(step), cfg) for step in s.steps])
    assert s.peak == (t.warmup, learning_rate(t.warmup, cfg))
    # eq. 3 at its peak: the paper's scale * d_model^-0.5 * warmup^-0.5, or inverse_sqrt's lr
    peak = t.lr * cfg.model.d_model**-0.5 * t.warmup**-0.5 if t.schedule == "noam" else t.lr
    assert s.peak[1] == pytest.approx(peak, rel=1e-12)
    up, down = s.steps <= t.warmup, s.steps >= t.warmup
    assert np.all(np.diff(s.lr[up]) > 0) and np.all(np.diff(s.lr[down]) < 0)
    slope = np.polyfit(np.log(s.steps[down]), np.log(s.lr[down]), 1)[0]
    assert slope == pytest.approx(-0.5, abs=1e-9)  # inverse square root after the warmup
    line = drawn.figure["schedule"].axes[0].lines[0]
    np.testing.assert_array_equal(line.get_xdata(), s.steps)
    np.testing.assert_array_equal(line.get_ydata(), s.lr)


def test_schedule_shows_the_whole_warmup_of_a_short_run() -> None:
    s = plot_paper.schedule(load_config(TINY, ["train.max_updates=100"]))  # warmup 300
    assert s.steps[-1] == 600 and s.peak[0] == 300 and s.max_updates == 100


# ---- §5.4 label smoothing ------------------------------------------------------------------------


def test_smoothing_of_checkpoint_is_the_losss_rule(tmp_path: Path, drawn: Drawn) -> None:
    assert_png(plot("-k", "smoothing", "--checkpoint", DEMO_MODEL, out=tmp_path / "ls.png"), "smoothing")
    state = ckpt.load(DEMO_MODEL)
    tokenizer, eps, vocab = state.tokenizer(), state.config.train.label_smoothing, state.vocab_sizes[1]
    s = drawn.data["smoothing"]
    assert (s.epsilon, len(s.smoothed), s.vocab_from) == (eps, vocab, "the checkpoint's target vocabulary")
    assert s.target == tokenizer.encode_tgt([plot_paper.EXAMPLE_SENTENCES[0]])[0][0]
    assert s.labels == tuple(tokenizer.tgt_pieces(list(s.shown)))
    assert s.smoothed.sum() == pytest.approx(1.0, abs=1e-12)
    assert s.smoothed[s.target] == pytest.approx(1 - eps + eps / vocab, abs=1e-15)
    others = np.delete(s.smoothed, s.target)
    np.testing.assert_allclose(others, eps / vocab, rtol=1e-12)
    np.testing.assert_array_equal(s.one_hot, np.eye(vocab)[s.target])
    # the loss trains towards exactly this distribution: -sum_v q_v log p_v == label_smoothed_loss
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = -(torch.from_numpy(s.smoothed) * logits.log_softmax(-1)).sum()
    loss, _ = label_smoothed_loss(logits[None], torch.tensor([s.target]), eps, tokenizer.special_ids.pad)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    bars = [patch.get_height() for patch in drawn.figure["smoothing"].axes[0].patches]
    np.testing.assert_array_equal(bars, [*s.one_hot[s.shown], *s.smoothed[s.shown]])


@pytest.mark.parametrize("args, vocab, eps", [
    ([], 32000, 0.1), (["--vocab-size", "37000", "--set", "train.label_smoothing=0"], 37000, 0.0)])
def test_smoothing_of_config(tmp_path: Path, drawn: Drawn, args: list[str], vocab: int, eps: float) -> None:
    plot("-k", "smoothing", "-c", BASE, *args, out=tmp_path / "ls.png")
    s = drawn.data["smoothing"]
    assert (len(s.smoothed), s.epsilon, s.target) == (vocab, eps, plot_paper.EXAMPLE_ID)
    assert s.smoothed.sum() == pytest.approx(1.0, abs=1e-12)
    assert s.smoothed[s.target] == pytest.approx(1 - eps + eps / vocab, abs=1e-15)
    assert s.labels == tuple(f"id {i}" for i in range(11)) + (() if s.target < 11 else (f"id {s.target}",))


# ---- §3.2.3 masks --------------------------------------------------------------------------------


def test_masks_of_checkpoint_are_the_models(tmp_path: Path, drawn: Drawn) -> None:
    out = plot("-k", "masks", "--checkpoint", DEMO_MODEL, *[a for line in LINES for a in ("-t", line)],
               out=tmp_path / "masks.png")
    assert_png(out, "masks")
    state = ckpt.load(DEMO_MODEL)
    tokenizer, model = state.tokenizer(), state.build_model().eval()
    ids = tokenizer.special_ids
    src, tgt = tokenizer.encode_src(LINES), tokenizer.encode_tgt(LINES)
    m = drawn.data["masks"]
    assert m.src_labels == tuple((*tokenizer.src_id_pieces(s), "</s>") for s in src)
    assert m.tgt_labels == ("<s>", *tokenizer.tgt_pieces(max(tgt, key=len)))
    assert m.row == 0  # "Good morning!" has the fewest pieces: the most padding
    batch = collate(src, tgt, pad=ids.pad, bos=ids.bos, eos=ids.eos)
    with torch.no_grad():
        memory, src_pad = model.encode(batch.src)
        np.testing.assert_array_equal(m.padding, ~src_pad.numpy())  # True = may attend = not padding
        np.testing.assert_array_equal(m.padding.sum(1), [len(s) + 1 for s in src])
        # causal: output t of the decoder changes when key j changes iff the mask lets t attend to j
        row = max(range(len(tgt)), key=lambda b: len(tgt[b]))
        tgt_in, mem, pad = batch.tgt_in[row:row + 1], memory[row:row + 1], src_pad[row:row + 1]
        base = model.decode(tgt_in, mem, pad)
        depends = np.zeros_like(m.causal)
        for j in range(tgt_in.size(1)):
            changed = tgt_in.clone()
            changed[0, j] = ids.unk if tgt_in[0, j] != ids.unk else ids.eos
            depends[:, j] = (model.decode(changed, mem, pad) - base).abs().amax(-1)[0].numpy() > 1e-5
    np.testing.assert_array_equal(m.causal, depends)
    np.testing.assert_array_equal(m.causal, np.tril(np.ones_like(m.causal)))
    images = [ax.images[0].get_array() for ax in drawn.figure["masks"].axes if ax.images]
    np.testing.assert_array_equal(images[0], m.padding)
    np.testing.assert_array_equal(images[1], np.broadcast_to(m.padding[m.row], (m.padding.shape[1],) * 2))
    np.testing.assert_array_equal(images[2], m.causal)


@pytest.mark.parametrize("texts, lengths", [([], plot_paper.EXAMPLE_LENGTHS), (["a b c", "d"], (3, 1))])
def test_masks_without_checkpoint(tmp_path: Path, drawn: Drawn, texts: list[str], lengths: tuple[int, ...]) -> None:
    plot("-k", "masks", "-c", TINY, *[a for t in texts for a in ("--text", t)], out=tmp_path / "masks.png")
    m = drawn.data["masks"]
    np.testing.assert_array_equal(m.padding.sum(1), [n + 1 for n in lengths])  # + </s>
    for b, n in enumerate(lengths):  # right-padded: the sentence and its </s>, then padding
        assert m.padding[b, : n + 1].all() and not m.padding[b, n + 1:].any()
    np.testing.assert_array_equal(m.causal, np.tril(np.ones((max(lengths) + 1,) * 2, dtype=bool)))
    if texts:
        assert m.src_labels == (("a", "b", "c", "</s>"), ("d", "</s>")) and m.tgt_labels == ("<s>", "a", "b", "c")


# ---- all, defaults, refusals ---------------------------------------------------------------------


def test_all_of_a_run_dir(tmp_path: Path, drawn: Drawn) -> None:
    run = tmp_path / "run"
    write_metrics(run)
    shutil.copy(DEMO_MODEL, run / "averaged.pt")
    result = run_cli("plot", run, "--kind", "all")
    assert result.exit_code == 0, result.stderr
    assert png_size(run / "curves.png") == pixels(CURVES_FIGSIZE)
    for kind in plot_paper.KINDS:
        assert_png(run / f"{kind}.png", kind)
    assert drawn.data["positions"].pe.shape == (256, 64)  # the checkpoint's model, not the defaults
    assert len(drawn.data["smoothing"].smoothed) == 400


def test_back_compat_and_default_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_metrics(tmp_path / "run")
    assert run_cli("plot", tmp_path / "run").exit_code == 0
    assert png_size(tmp_path / "run" / "curves.png") == pixels(CURVES_FIGSIZE)
    monkeypatch.chdir(tmp_path)
    assert run_cli("plot", "-k", "schedule", "-c", TINY).exit_code == 0
    assert_png(tmp_path / "schedule.png", "schedule")
    (tmp_path / "figs").mkdir()  # an existing directory gets KIND.png
    assert plot_paper._outputs("masks", None, tmp_path / "figs") == {"masks": tmp_path / "figs" / "masks.png"}
    assert plot_paper._outputs("all", None, Path("new")) == {k: Path("new") / f"{k}.png" for k in plot_paper.KINDS}


@pytest.mark.parametrize("args, fragment", [
    (["-k", "masks", "--checkpoint", "nope.pt"], "checkpoint not found: nope.pt"),
    (["-k", "masks", "--checkpoint", "."], "no checkpoint in ."),
    (["-k", "schedule", "-c", str(TINY), "--checkpoint", str(DEMO_MODEL)], "not both"),
    (["-k", "pictures"], "--kind must be one of curves|positions|masks|schedule|smoothing|all"),
    (["-k", "curves"], "--kind curves needs RUN_DIR"),
    (["-k", "all", "-o", "x.png"], "--output must be a directory"),
    (["-k", "smoothing", "--vocab-size", "1"], "--vocab-size must be >= 2"),
    (["-k", "positions", "--set", "model.d_model=-1"], "model.d_model"),
    ([".", "-k", "positions"], "no checkpoint and no config.yaml"),
])
def test_user_mistakes_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                    fragment: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(run_cli("plot", *args), fragment)
    assert not list(tmp_path.iterdir())


def test_without_matplotlib_the_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    error = assert_one_line_error(run_cli("plot", "-k", "schedule", "-c", TINY, "-o", tmp_path / "s.png"))
    assert error == "error: plotting needs matplotlib: pip install 'nmt[plot]'"


def test_help_names_every_kind_and_section() -> None:
    result = run_cli("plot", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for fragment in ("positions", "§3.5", "masks", "§3.2.3", "schedule", "§5.3", "smoothing", "§5.4",
                     "--checkpoint", "--vocab-size", "--text"):
        assert fragment in text
