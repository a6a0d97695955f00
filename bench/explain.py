"""How long `nmt explain` takes, and how big its page is, on a randomly initialised base-size model.

Usage (from the repository root):

    python bench/explain.py                       # configs/base.yaml, a 30-word sentence, 2 threads
    python bench/explain.py --config tiny --words 10 --repeats 5 --keep /tmp/explain-bench

Builds a checkpoint with the `model:` section of configs/<config>.yaml (base: d_model 512, 8 heads, 6 + 6 layers,
d_ff 2048) and random weights, and a tokenizer of 32,000 entries: a SentencePiece model trained on the built-in demo
corpus, its pieces first, then dummy entries up to the size of a real vocabulary (the embedding and the output
softmax cost what they cost in a real model). Then, per repeat, what `nmt explain` does: load the checkpoint
(`Translator.load`), explain a WORDS-word demo sentence (`explain_sentence`: the traced beam search and the
step-by-step walk through the model) and write the page. A random model hardly ever ends a sentence, so its search
runs to the length limit (source length + 50 steps): the slow case. Reported: the wall-clock median, min and max of
each phase and of their total, their CPU seconds (all threads: on a shared machine, what the work itself took), and
the page's size. Goal (issue 36): <= 5 s and <= 2 MB for 30 words on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import ROOT, model_config, table

sys.path.insert(0, str(ROOT))

from nmt.checkpoint import Checkpoint  # noqa: E402
from nmt.config.experiment import Config  # noqa: E402
from nmt.demo.files import write_demo  # noqa: E402
from nmt.explain.command import explain_sentence, load  # noqa: E402
from nmt.explain.page import write_page  # noqa: E402
from nmt.model import Transformer  # noqa: E402
from nmt.tokenizer import Tokenizer, train_spm  # noqa: E402

VOCAB = 32_000


def demo_text(path: Path) -> list[str]:
    raw = write_demo(path, n_train=2000, n_valid=10, n_test=10, seed=1)
    return Path(raw["train"] + ".en").read_text(encoding="utf-8").splitlines()


def tokenizer(lines: list[str]) -> Tokenizer:
    """A SentencePiece model of the demo corpus, its ids mapped into a vocabulary of VOCAB entries."""
    model = train_spm(lines, vocab_size=400)
    pieces = Tokenizer(model).tgt_pieces(list(range(400)))
    names = ["<pad>", "<unk>", "<s>", "</s>", *(p for p in pieces[4:])]
    names += [f"\u2581dummy{i}" for i in range(VOCAB - len(names))]
    return Tokenizer(model, src_vocab=names, src_lang="en", tgt_lang="de")


def build_checkpoint(config: str, path: Path, lines: list[str]) -> Path:
    cfg = Config()
    cfg.model = model_config(config)
    tok = tokenizer(lines)
    torch.manual_seed(0)
    model = Transformer.from_config(cfg.model, VOCAB, VOCAB, pad_id=tok.special_ids.pad, joint_vocab=tok.joint)
    Checkpoint.create(model.state_dict(), cfg, tok, (VOCAB, VOCAB), langs=("en", "de")).save(path)
    return path


def sentence(lines: list[str], words: int) -> str:
    """The first `words` words of the demo corpus' sentences, joined."""
    found: list[str] = []
    for line in lines:
        found += line.rstrip(".").split()
        if len(found) >= words:
            break
    return " ".join(found[:words]) + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="base")
    parser.add_argument("--words", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="Build the checkpoint and write the page here (kept).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = args.keep or Path(tempfile.mkdtemp(prefix="explain-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    lines = demo_text(work / "raw")
    ckpt = build_checkpoint(args.config, work / "random.pt", lines)
    text = sentence(lines, args.words)
    wall: dict[str, list[float]] = {"load": [], "explain": [], "page": [], "total": []}
    cpu: dict[str, list[float]] = {name: [] for name in wall}
    for _ in range(args.repeats):
        marks = [(time.perf_counter(), time.process_time())]
        translator = load(ckpt)
        marks.append((time.perf_counter(), time.process_time()))
        data = explain_sentence(translator, text)
        marks.append((time.perf_counter(), time.process_time()))
        page = write_page(data, work / "explain.html")
        marks.append((time.perf_counter(), time.process_time()))
        for i, name in enumerate(wall):
            a, b = (marks[i], marks[i + 1]) if i < 3 else (marks[0], marks[-1])
            wall[name].append(b[0] - a[0])
            cpu[name].append(b[1] - a[1])
    m = data["model"]
    print(f"{args.config}: d_model {m['d_model']}, {m['n_heads']} heads, {m['encoder_layers']}+{m['decoder_layers']} "
          f"layers, vocabulary {VOCAB}; {args.words} words = {m['src_len']} source tokens, {m['tgt_len']} decoder "
          f"positions; {args.threads} threads; checkpoint {ckpt.stat().st_size / 2**20:.0f} MiB")
    print(table(["phase", "median s", "min s", "max s", "CPU s (median)"],
                [[name, *(f"{f(v):.2f}" for f in (statistics.median, min, max)), f"{statistics.median(cpu[name]):.2f}"]
                 for name, v in wall.items()]))
    print(f"search: {len(data['beam']['steps'])} steps of beam {data['decode']['beam']}; other processes share this "
          "machine's CPUs: compare the min and the CPU seconds (all threads) with the goal")
    print(f"page: {page} ({page.stat().st_size / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
