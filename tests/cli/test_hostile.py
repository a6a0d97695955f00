"""Hostile input for every command, property-based: random bytes, invalid UTF-8, NUL and control characters,
100k-character lines, CRLF, no final newline, mismatched line counts, empty files, unknown YAML keys, wrong
types, negative sizes. Each gets a correct result or a one-line `error:` with a non-zero exit: never a
traceback, never a hang, never a partial output file presented as complete.

Commands run in-process through tests.helpers.cli's run_cli (the code path of `nmt ...` without the start-up cost);
test_cli.py covers the real subprocesses. `--long` / NMT_LONG_TESTS=1 tries many more examples.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt.train.loop import train
from tests.helpers.cli import USAGE_ERROR, USER_ERROR, assert_one_line_error, run_cli
from tests.helpers.report import report_figures
from tests.helpers.training import tiny_config

LONG = os.environ.get("NMT_LONG_TESTS") == "1"
FIGURES = {"inputs tried": 0, "accepted": 0, "refused with one line": 0, "refused by the option parser": 0,
           "losses found": 0}


def examples(ci: int, long: int):
    return settings(max_examples=long if LONG else ci, deadline=None, derandomize=not LONG,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    line = "hostile input figures: " + ", ".join(f"{k} {v}" for k, v in FIGURES.items())
    report_figures(request, line, {"suite": "hostile", "long": LONG, **FIGURES})


class Hang(BaseException):
    """Raised by the alarm: a BaseException so no `except Exception` in the code under test can eat it."""


@contextlib.contextmanager
def deadline(seconds: int):
    def alarm(*_):
        raise Hang(f"no result within {seconds}s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def nmt(*args: str, input: bytes | None = None, seconds: int = 120):
    """Run one command in-process; fail on a hang or on an exception that escaped the CLI."""
    with deadline(seconds):
        result = run_cli(*args, input=input)
    FIGURES["inputs tried"] += 1
    if isinstance(result.exception, Hang):
        raise AssertionError(f"nmt {' '.join(map(str, args))[:200]}: hang ({result.exception})")
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"nmt {' '.join(map(str, args))[:200]} escaped with {result.exception!r}\n{result.stderr[-2000:]}")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if result.exit_code == 0:
        FIGURES["accepted"] += 1
    else:
        error_line(result)
        FIGURES["refused by the option parser" if result.exit_code == USAGE_ERROR else "refused with one line"] += 1
    return result


def no_loss(ok: bool, what: str) -> None:
    """An output that is missing, short, partial or presented as complete when it is not."""
    if not ok:
        FIGURES["losses found"] += 1
    assert ok, what


def error_line(result) -> str:
    """The one `error:` line of a refusal, by the option parser (a bad option value) or by the command."""
    return assert_one_line_error(result, exit_code=USAGE_ERROR if result.exit_code == USAGE_ERROR else USER_ERROR)


def n_lines(data: bytes) -> int:
    """Lines as a reader splitting on "\\n" sees them (an unterminated last line counts)."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@contextlib.contextmanager
def scratch():
    path = Path(tempfile.mkdtemp(prefix="nmt-hostile-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- strategies

NASTY = [b"\x00", b"\r", b"\x1b[31m", b"\x07", b"\x7f", b"\t", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80",
         "\u2028".encode(), "\ufeff".encode(), "\x85".encode(), "\u200b".encode(), "🙂".encode(), b" ", b""]
LONG_LINE = b"forty-two " * 10_000  # 100k characters


def line_bytes() -> st.SearchStrategy[bytes]:
    piece = st.one_of(
        st.text(max_size=30).map(lambda s: s.replace("\n", " ").encode("utf-8", "surrogatepass")),
        st.binary(max_size=20).map(lambda b: b.replace(b"\n", b" ")),
        st.sampled_from(NASTY),
        st.sampled_from(["forty-two", "the red car", "three hundred", "I see the old dog."]).map(str.encode),
    )
    return st.lists(piece, max_size=6).map(b"".join)


@st.composite
def text_file(draw, max_lines: int = 8) -> bytes:
    """A hostile text file: lines of random/nasty bytes, sometimes one of 100k characters, LF or CRLF, with or
    without a final newline."""
    lines = draw(st.lists(line_bytes(), max_size=max_lines))
    if lines and draw(st.integers(0, 9)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), LONG_LINE)
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = newline.join(lines)
    if lines and draw(st.booleans()):
        data += newline
    return data


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def checkpoint_path(demo_data, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("hostile-run") / "run"
    train(tiny_config(demo_data, run, "train.max_updates=2", "train.average_last=0"), progress=False)
    return run / "last.pt"


@pytest.fixture(scope="module")
def clean_pairs(demo_raw) -> tuple[list[bytes], list[bytes]]:
    src = Path(demo_raw["train"] + ".en").read_bytes().splitlines()[:60]
    tgt = Path(demo_raw["train"] + ".de").read_bytes().splitlines()[:60]
    return src, tgt


# ---------------------------------------------------------------- translate


@examples(ci=25, long=400)
@given(data=text_file(), to_file=st.booleans(), mode=st.sampled_from(["greedy", "beam", "scores", "nbest"]))
def test_translate_any_bytes_one_line_out_per_line_in(checkpoint_path, data, to_file, mode):
    fast = ["--set", "decode.max_len_a=0", "--set", "decode.max_len_b=3", "--set", "decode.chunk_lines=3",
            "--no-progress", "--beam", "1" if mode == "greedy" else "2"]
    fast += {"scores": ["--scores"], "nbest": ["--nbest", "2"]}.get(mode, [])
    with scratch() as tmp:
        if to_file:
            src, out = tmp / "in.txt", tmp / "out.txt"
            src.write_bytes(data)
            result = nmt("translate", "--checkpoint", checkpoint_path, "-i", src, "-o", out, *fast)
            output = out.read_bytes()
            no_loss(sorted(p.name for p in tmp.iterdir()) == ["in.txt", "out.txt"], "a temp file was left over")
        else:
            result = nmt("translate", "--checkpoint", checkpoint_path, *fast, input=data)
            output = result.stdout_bytes
    assert result.exit_code == 0
    assert is_utf8(output) and (not output or output.endswith(b"\n"))
    rows = output.decode().split("\n")[:-1]
    if mode == "nbest":  # "line<TAB>text<TAB>score", 1..2 rows per input line, in order
        numbers = [int(r.split("\t")[0]) for r in rows]
        no_loss(sorted(set(numbers)) == list(range(1, n_lines(data) + 1)) and numbers == sorted(numbers),
                "n-best rows do not cover every input line in order")
        assert all(r.count("\t") == 2 for r in rows)
    else:
        no_loss(len(rows) == n_lines(data), f"{n_lines(data)} lines in, {len(rows)} out")
        assert mode != "scores" or all(math.isfinite(float(r.rsplit("\t", 1)[1])) for r in rows)
    if not is_utf8(data):
        assert "invalid UTF-8" in result.stderr


def test_translate_failure_midway_leaves_no_partial_output(checkpoint_path, tmp_path, monkeypatch):
    from nmt.translation.translator import Translator

    out = tmp_path / "out.txt"
    out.write_text("the previous, complete translation\n")
    real = Translator.translate_chunk
    calls = {"n": 0}

    def fail_on_second_chunk(self, lines, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real(self, lines, **kwargs)

    monkeypatch.setattr(Translator, "translate_chunk", fail_on_second_chunk)
    src = tmp_path / "in.txt"
    src.write_text("forty-two\n" * 50)
    result = nmt("translate", "--checkpoint", checkpoint_path, "-i", src, "-o", out, "--set", "decode.chunk_lines=10",
                 "--set", "decode.max_len_b=3", "--no-progress")
    assert "No space left on device" in error_line(result)
    no_loss(out.read_text() == "the previous, complete translation\n", "a failed run replaced the output")
    no_loss(sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"], "a temp file was left over")


# ---------------------------------------------------------------- score


@examples(ci=25, long=400)
@given(hyp=text_file(), ref=text_file(), from_stdin=st.booleans())
def test_score_any_bytes(hyp, ref, from_stdin):
    with scratch() as tmp:
        (tmp / "hyp").write_bytes(hyp)
        (tmp / "ref").write_bytes(ref)
        if from_stdin:
            result = nmt("score", "--ref", tmp / "ref", "--json", input=hyp)
        else:
            result = nmt("score", "--ref", tmp / "ref", "--hyp", tmp / "hyp", "--json")
    bom = "\ufeff".encode()
    count = [n_lines(x[len(bom):] if x.startswith(bom) else x) for x in (hyp, ref)]
    if not is_utf8(hyp) or not is_utf8(ref):
        assert "invalid UTF-8" in error_line(result)
    elif count[0] != count[1]:
        assert f"hypothesis has {count[0]} lines but reference" in error_line(result)
    elif LONG_LINE in hyp or LONG_LINE in ref:
        assert "TER cannot score lines over 1,000 words" in error_line(result)
    else:
        assert result.exit_code == 0, result.stderr
        scores = json.loads(result.stdout)
        # sacreBLEU's own float noise gives 100.00000000000004 for a perfect match
        assert 0 <= scores["bleu"]["score"] <= 100 + 1e-9 and scores["chrf"]["score"] >= 0
        assert scores["ter"]["score"] >= 0


def test_score_long_lines_do_not_hang(tmp_path):
    """TER's cost grows ~cubically with line length: over 1,000 words it is refused at once, not left to run for
    hours; BLEU and chrF score such lines in well under a second."""
    words = " ".join(f"w{i % 977}" for i in range(20_000))
    (tmp_path / "ref").write_text(words + "\n" + words[::-1] + "\n")
    (tmp_path / "hyp").write_text(words[: len(words) // 2] + "\n" + words + "\n")
    args = ("score", "--ref", tmp_path / "ref", "--hyp", tmp_path / "hyp")
    assert "hypothesis: line 1 has 10,011 words" in error_line(nmt(*args, seconds=60))
    result = nmt(*args, "--metrics", "bleu,chrf", seconds=60)
    assert result.exit_code == 0 and "BLEU" in result.stdout and "chrF" in result.stdout


# ---------------------------------------------------------------- prepare


@st.composite
def parallel_files(draw):
    """Clean demo pairs with hostile lines mixed in; sometimes one side gets extra lines or is empty."""
    n = draw(st.integers(0, 60))
    extra = draw(st.lists(st.tuples(st.integers(0, 60), line_bytes(), line_bytes()), max_size=6))
    mismatch = draw(st.sampled_from([0] * 6 + [-1, 1, 2]))
    crlf = draw(st.booleans())
    final_newline = draw(st.booleans())
    return n, extra, mismatch, crlf, final_newline


def build_side(lines: list[bytes], crlf: bool, final_newline: bool) -> bytes:
    newline = b"\r\n" if crlf else b"\n"
    return newline.join(lines) + (newline if lines and final_newline else b"")


@examples(ci=15, long=200)
@given(spec=parallel_files(), tsv=st.booleans(), coverage=st.sampled_from(["1.0", "0.98"]))
def test_prepare_hostile_corpora(clean_pairs, spec, tsv, coverage):
    n, extra, mismatch, crlf, final_newline = spec
    src, tgt = list(clean_pairs[0][:n]), list(clean_pairs[1][:n])
    for pos, s, t in extra:
        src.insert(min(pos, len(src)), s)
        tgt.insert(min(pos, len(tgt)), t)
    if mismatch > 0:
        src += [b"surplus line"] * mismatch
    elif mismatch < 0 and tgt:
        tgt.pop()
        mismatch = -1
    else:
        mismatch = 0
    options = ["--vocab-size", "120", "--set", f"data.character_coverage={coverage}"]
    with scratch() as tmp:
        out = tmp / "data"
        if tsv:
            lines = [s + b"\t" + t for s, t in zip(src, tgt)]
            (tmp / "c.tsv").write_bytes(build_side(lines, crlf, final_newline))
            result = nmt("prepare", "--train", tmp / "c.tsv", "-o", out, *options)
            src_bytes = tgt_bytes = (tmp / "c.tsv").read_bytes()
        else:
            src_bytes, tgt_bytes = build_side(src, crlf, final_newline), build_side(tgt, crlf, final_newline)
            (tmp / "c.en").write_bytes(src_bytes)
            (tmp / "c.de").write_bytes(tgt_bytes)
            result = nmt("prepare", "--train", tmp / "c", "--valid", tmp / "c", "-o", out, *options)
        meta_file = out / "meta.json"
        if result.exit_code != 0:
            no_loss(not meta_file.exists(), "a failed preparation looks complete")
            line = error_line(result)
            if not (is_utf8(src_bytes) and is_utf8(tgt_bytes)):  # (a count mismatch may be found first)
                assert "invalid UTF-8" in line or "tab" in line or "line counts differ" in line, line
            elif not tsv and n_lines(src_bytes) != n_lines(tgt_bytes):
                assert "line counts differ" in line, line
            return
        # accepted: only when the input was well-formed, and what it says it holds is there
        # (a popped or added line is not always a mismatch: a last empty line without its newline is no line)
        assert is_utf8(src_bytes) and is_utf8(tgt_bytes) and (tsv or n_lines(src_bytes) == n_lines(tgt_bytes))
        meta = json.loads(meta_file.read_text())
        assert 0 < meta["splits"]["train"]["pairs"] <= n_lines(src_bytes)
        if not tsv:
            assert meta["splits"]["valid"]["pairs"] == n_lines(src_bytes)  # never filtered
            valid_text = (out / "valid.en").read_bytes()
            assert valid_text.count(b"\n") == n_lines(src_bytes) and b"\r" not in valid_text
        from nmt.data.datadir import DataDir

        assert len(DataDir.open(out).split("train")) == meta["splits"]["train"]["pairs"]


def test_prepare_one_hundred_k_character_lines_and_empty_files(clean_pairs, tmp_path):
    src, tgt = clean_pairs
    (tmp_path / "c.en").write_bytes(b"\n".join(src[:30] + [LONG_LINE]) + b"\n")
    (tmp_path / "c.de").write_bytes(b"\n".join(tgt[:30] + [LONG_LINE]) + b"\n")
    result = nmt("prepare", "--train", tmp_path / "c", "-o", tmp_path / "data", "--vocab-size", "120")
    assert result.exit_code == 0, result.stderr
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["splits"]["train"]["pairs"] == 30 and meta["filters"]["too_long"] == 1
    (tmp_path / "e.en").write_bytes(b"")
    (tmp_path / "e.de").write_bytes(b"")
    assert "empty" in error_line(nmt("prepare", "--train", tmp_path / "e", "-o", tmp_path / "empty"))
    assert not (tmp_path / "empty" / "meta.json").exists()


# ---------------------------------------------------------------- plot

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)
NUMBER = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3),
                   st.none())


@st.composite
def metrics_line(draw) -> bytes:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.binary(max_size=40)).replace(b"\n", b" ")
    if kind == 1:
        return json.dumps(draw(JSON)).encode()
    record = {"type": draw(st.sampled_from(["train", "valid", "other", 3])), "step": draw(NUMBER)}
    for key in draw(st.lists(st.sampled_from(["loss", "ppl", "bleu", "lr", "nll"]), max_size=5)):
        record[key] = draw(NUMBER)
    line = json.dumps(record).encode()
    return line[: draw(st.integers(1, len(line)))] if kind == 2 else line  # 2: a line cut by a kill


@examples(ci=6, long=60)
@given(lines=st.lists(metrics_line(), max_size=12), final_newline=st.booleans())
def test_plot_hostile_metrics(lines, final_newline):
    pytest.importorskip("matplotlib")
    with scratch() as tmp:
        (tmp / "run").mkdir()
        (tmp / "run" / "metrics.jsonl").write_bytes(b"\n".join(lines) + (b"\n" if final_newline else b""))
        result = nmt("plot", tmp / "run", "-o", tmp / "curves.png")
        png = tmp / "curves.png"
        if result.exit_code == 0:
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            no_loss(not png.exists(), "a failed plot left a PNG")
        no_loss(sorted(p.name for p in tmp.iterdir()) in (["run"], ["curves.png", "run"]), "a temp file was left")


# ---------------------------------------------------------------- configs (train, translate, prepare)

KEYS = {
    "model": ["d_model", "n_heads", "d_ff", "encoder_layers", "decoder_layers", "dropout", "attention_dropout",
              "pre_norm", "max_positions", "share_all_embeddings"],
    "train": ["device", "amp", "threads", "seed", "max_tokens", "update_freq", "max_updates", "max_epochs",
              "max_minutes", "lr", "schedule", "warmup", "warmup_init_lr", "betas", "eps", "weight_decay",
              "clip_norm", "label_smoothing", "log_every", "valid_every", "valid_bleu_sentences", "best_metric",
              "patience", "save_every", "keep_last", "average_last", "max_bad_updates", "tensorboard"],
    "decode": ["beam", "length_penalty", "max_len_a", "max_len_b", "max_tokens", "chunk_lines", "nbest",
               "max_input_tokens"],
    "data": ["src_lang", "tgt_lang", "normalize", "max_len", "max_ratio", "dedup", "vocab_size", "spm_type",
             "joint_vocab", "character_coverage", "spm_sample", "num_proc", "seed"],
}
# Values that are wrong (types, signs, specials) or valid but small: nothing here may make a run big or long.
VALUES = st.one_of(
    st.sampled_from([-(2**63), -1, 0, 1, 2, 3, -0.5, 0.0, 0.5, 1.5, math.nan, math.inf, -math.inf, True, False,
                     None, "", "x", "-1", "1e-3", "nan", "cpu", "cuda", "meta", "cuda:7", "foo:0", "bf16", "fp16",
                     [], [0.9], [2.0, 3.0], [0.9, 0.98], ["a", "b"], {}, {"a": 1}, "\x00", "ü" * 3]),
    st.text(max_size=8),
    st.integers(-(2**70), 2**70).filter(lambda v: v <= 3),
)
HEAVY = {("model", "d_model"), ("model", "d_ff"), ("model", "encoder_layers"), ("model", "decoder_layers"),
         ("model", "n_heads"), ("train", "max_updates"), ("train", "max_minutes"), ("train", "threads")}


@st.composite
def hostile_config(draw) -> tuple[bytes, dict]:
    """YAML text: random bytes, or the tiny config with hostile values and unknown keys/sections."""
    if draw(st.integers(0, 9)) == 0:
        raw = draw(st.one_of(st.binary(max_size=60), st.text(max_size=60).map(str.encode)))
        return raw, {}
    changes: dict = {}
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from([*KEYS, "tarin", "Model"]))
        keys = KEYS.get(section, ["lr"]) + ["d_modle", "max_update", ""]
        key = draw(st.sampled_from(keys))
        value = draw(VALUES)
        if (section, key) in HEAVY and isinstance(value, int) and not isinstance(value, bool) and value > 2:
            value = 2
        changes.setdefault(section, {})[key] = value
    return yaml.safe_dump(changes, allow_unicode=True).encode(), changes


def tiny_yaml(demo_data: Path, run: Path) -> dict:
    cfg = tiny_config(demo_data, run, "train.max_updates=2", "train.valid_every=2", "train.save_every=2",
                      "train.valid_bleu_sentences=3", "train.average_last=2", "train.max_tokens=2048",
                      "decode.max_len_b=3", "decode.max_len_a=0")
    return cfg.to_dict()


@examples(ci=20, long=300)
@given(config=hostile_config())
def test_train_and_translate_with_hostile_configs(demo_data, checkpoint_path, config):
    raw, changes = config
    with scratch() as tmp:
        base = tiny_yaml(demo_data, tmp / "run")
        path = tmp / "c.yaml"
        if changes:
            merged = {s: dict(v) for s, v in base.items()}
            for section, values in changes.items():
                merged.setdefault(section, {}).update(values)
            path.write_text(yaml.safe_dump(merged, allow_unicode=True), encoding="utf-8")
            pinned = [f"data.dir={demo_data}", f"train.run_dir={tmp / 'run'}"]
        else:  # random bytes: if they parse at all (b"" is the defaults: the paper's base model), keep it tiny
            path.write_bytes(raw)
            pinned = [f"{s}.{k}={json.dumps(v)}" for s, values in base.items() for k, v in values.items()]
        pinned = [x for p in pinned for x in ("--set", p)]
        result = nmt("train", "--config", path, *pinned, "--no-progress")
        if result.exit_code == 0:
            from nmt import checkpoint

            checkpoint.load(tmp / "run" / "last.pt")  # a run that says it finished left a loadable checkpoint
        nmt("translate", "--config", path, "--checkpoint", checkpoint_path, "--no-progress",
            input=b"forty-two\n\xff\n\n")


@examples(ci=20, long=300)
@given(args=st.lists(st.one_of(st.text(max_size=20), st.sampled_from(
    ["model.d_model=-1", "decode.beam=0", "decode.beam=x", "train.lr=", "a=b", "=", ".=", "decode.=1",
     "decode.nbest=9", "decode.max_tokens=-5", "decode.max_len_a=nan", "decode.max_len_b=-3",
     "decode.max_len_a=-1", "decode.max_input_tokens=0", "decode.length_penalty=inf", "nope.x=1",
     "decode.chunk_lines=1", "decode.beam=2"])), max_size=3))
def test_translate_with_hostile_set_overrides(checkpoint_path, args):
    sets = [x for a in args for x in ("--set", a)]
    result = nmt("translate", "--checkpoint", checkpoint_path, *sets, "--no-progress", input=b"forty-two\n\nseven\n")
    if result.exit_code == 0:
        assert result.stdout_bytes.count(b"\n") == 3


# (command and options, must it be refused?) - the others may also succeed, but never with a traceback
OPTIONS = [
    (("translate", "--beam", "0"), True), (("translate", "--beam", "-2"), True),
    (("translate", "--beam", "many"), True), (("translate", "--nbest", "9"), True),
    (("translate", "--max-tokens", "-1"), True), (("translate", "--device", "foo"), True),
    (("translate", "--device", "cuda:0"), True), (("translate", "--device", "cpu:-1"), True),
    (("translate", "--dtype", "fp8"), True), (("translate", "--dtype", "fp16"), True),
    (("translate", "--threads", "-3"), False), (("translate", "--quantize", "int4"), True),
    (("translate", "--attention-layer", "99"), True), (("translate", "--length-penalty", "nan"), False),
    (("translate", "-i", "{tmp}"), True), (("translate", "-o", "{tmp}"), True),
    (("translate", "-i", "{tmp}/missing.txt"), True), (("translate", "--checkpoint", "{tmp}"), True),
    (("translate", "--alignment", "{tmp}"), True), (("translate", "-o", "{tmp}/c.en/out"), True),
    (("score", "--ref", "{tmp}"), True), (("score", "--metrics", ""), True),
    (("score", "--metrics", "bleu,nope"), True), (("score", "--tokenize", "klingon"), True),
    (("score", "--ref", "{tmp}/missing"), True), (("score", "--hyp", "{tmp}"), True),
    (("average", "--last", "0"), True), (("average", "--last", "-2"), True),
    (("average", "--run-dir", "{tmp}/none"), True),
    (("prepare", "--train", "{tmp}"), True), (("prepare", "--train", "{tmp}/nope"), True),
    (("prepare", "--vocab-size", "-5", "--train", "{tmp}/c"), True),
    (("prepare", "--num-proc", "0", "--train", "{tmp}/c"), True),
    (("prepare", "--src-lang", "en", "--tgt-lang", "en", "--train", "{tmp}/c"), True),
    (("prepare", "--train", "{tmp}/c", "-o", "{tmp}/c.en"), True),
    (("prepare", "--train", "{tmp}/c", "--set", "data.seed=-1"), False),
    (("train", "--set", "train.device=foo"), True), (("train", "--set", "train.device=meta"), False),
    (("train", "--set", "train.seed=-1"), False), (("train", "--set", "train.betas=[2.0, 3.0]"), True),
    (("train", "--set", "train.betas=[a, b]"), True), (("train", "--set", "train.eps=-1"), True),
    (("train", "--set", "train.weight_decay=-1"), True), (("train", "--set", "model.max_positions=4"), True),
    (("train", "--set", "train.max_tokens=-1"), True), (("train", "--data-dir", "{tmp}/c.en"), True),
    (("train", "--set", "train.threads=-1"), False), (("train", "--set", "train.lr=inf"), False),
    (("train", "--set", "train.warmup_init_lr=nan"), False),
    (("plot", "{tmp}/none"), True),
]


@pytest.mark.parametrize("args,refused", OPTIONS, ids=lambda a: " ".join(a) if isinstance(a, tuple) else "")
def test_hostile_options(args, refused, demo_data, checkpoint_path, tmp_path):
    (tmp_path / "c.en").write_text("one\ntwo\n")
    (tmp_path / "c.de").write_text("eins\nzwei\n")
    shutil.copytree(checkpoint_path.parent, tmp_path / "run")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    command, rest = argv[0], argv[1:]
    if command == "translate" and "--checkpoint" not in rest:
        rest += ["--checkpoint", str(checkpoint_path)]
    if command == "score" and "--ref" not in rest:
        (tmp_path / "r").write_text("a\n")
        rest += ["--ref", str(tmp_path / "r")]
    if command == "average" and "--run-dir" not in rest:
        rest += ["--run-dir", str(tmp_path / "run")]
    if command == "prepare" and "-o" not in rest:
        rest += ["-o", str(tmp_path / "d")]
    if command == "train":
        cfg = tiny_yaml(demo_data, tmp_path / "run2")
        (tmp_path / "t.yaml").write_text(yaml.safe_dump(cfg))
        rest = ["--config", str(tmp_path / "t.yaml"), *rest, "--no-progress"]
    result = nmt(command, *rest, input=b"hello\n")
    if refused:
        error_line(result)
    assert not (tmp_path / "run" / "averaged.pt").exists()  # --last 0/-2 must not average anything
