"""Shared helpers of the model benchmarks (bench/train.py, bench/translate.py).

Both benches build our `nmt.model.Transformer` and a Hugging Face `MarianMTModel` of the same shape from
a config file's `model:` section, with random weights, and time them interleaved: every repeat runs
each contestant once, in alternating order, so that load from other users of the machine hits all of
them alike. Medians over the repeats are reported, and ratios are what to compare across machines.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python bench/x.py` from anywhere without installing
# isort: off
import nmt  # noqa: E402, F401  (before torch: it sets OpenMP's wait policy as `nmt` does, nmt/threads.py)
import torch  # noqa: E402
# isort: on

from nmt.config.experiment import Config, ModelConfig, load_config  # noqa: E402
from nmt.device import keep_freed_memory  # noqa: E402
from nmt.model import Transformer  # noqa: E402
from nmt.tokenizer import NMT_IDS  # noqa: E402

# as `nmt train/translate/serve` do; process-wide, so the peers timed in this process get it too
keep_freed_memory()

# the special ids of every SentencePiece model nmt trains; the HF model is configured with the same ones
PAD, UNK, BOS, EOS = NMT_IDS.pad, NMT_IDS.unk, NMT_IDS.bos, NMT_IDS.eos


def experiment(name: str) -> Config:
    """configs/<name>.yaml (or a path to a YAML file)."""
    path = Path(name)
    if not path.suffix:
        path = ROOT / "configs" / f"{name}.yaml"
    return load_config(path)


def model_config(name: str) -> ModelConfig:
    """The `model:` section of configs/<name>.yaml (or of a path to a YAML file)."""
    return experiment(name).model


def ours(cfg: ModelConfig, vocab: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer.from_config(dataclasses.replace(cfg, share_all_embeddings=True), vocab, vocab, pad_id=PAD,
                                   joint_vocab=True)


def marian(cfg: ModelConfig, vocab: int, seed: int = 0, attn: str = "sdpa"):
    """MarianMTModel with our dimensions: ReLU FFN, post-norm, static sinusoidal positions, embeddings
    scaled by sqrt(d_model) and shared by encoder, decoder and output layer. (Marian has no pre-norm
    option; a pre-norm config costs ours two extra LayerNorms, well under 1% of the work.)"""
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=vocab, decoder_vocab_size=vocab, d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function="relu",
        dropout=cfg.dropout, attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
        max_position_embeddings=cfg.max_positions, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=BOS, forced_eos_token_id=EOS,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return MarianMTModel._from_config(config, attn_implementation=attn)


OPUS_MT_VOCAB = 58_101  # Helsinki-NLP/opus-mt-en-de's


def opus_mt_dir(path: Path, vocab: int = OPUS_MT_VOCAB, seed: int = 0) -> Path:
    """A directory as MarianMTModel/MarianTokenizer.save_pretrained write it, with the shape of an OPUS-MT model
    (d_model 512, 6+6 layers, 8 heads, d_ff 2048, swish, shared vocabulary of 58,101, </s> = 0, <pad> last)
    and random weights. The SentencePiece models are small ones trained on the demo corpus; vocab.json is
    filled up to the full size with dummy pieces (the bench feeds ids, not text)."""
    import io

    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel

    from nmt.demo.files import write_demo

    raw = write_demo(path / "raw", n_train=2000, n_valid=10, n_test=10, seed=1)
    out = io.BytesIO()
    text = Path(raw["train"] + ".en").read_text(encoding="utf-8").splitlines()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=out, vocab_size=250, minloglevel=2)
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(out.getvalue())
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())
              if not (processor.is_control(i) or processor.is_unknown(i))]
    names = ["</s>", "<unk>", *pieces]
    names += [f"▁dummy{i}" for i in range(vocab - 1 - len(names))] + ["<pad>"]
    model_dir = path / "opus-mt"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "vocab.json").write_text(json.dumps({name: i for i, name in enumerate(names)}))
    for name in ("source.spm", "target.spm"):
        (model_dir / name).write_bytes(out.getvalue())
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "MarianTokenizer", "source_lang": "en", "target_lang": "de", "model_max_length": 512}))
    config = MarianConfig(
        vocab_size=vocab, decoder_vocab_size=vocab, d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
        activation_function="swish", scale_embedding=True, max_position_embeddings=512, pad_token_id=vocab - 1,
        eos_token_id=0, decoder_start_token_id=vocab - 1, forced_eos_token_id=0, share_encoder_decoder_embeddings=True)
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.1)
    model.save_pretrained(model_dir)
    return model_dir


def random_batch(batch: int, min_len: int, max_len: int, vocab: int, seed: int) -> torch.Tensor:
    """[batch, max_len + 1] random non-special ids with lengths in [min_len, max_len], then EOS, right-padded."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=g)
    lengths[0] = max_len  # the padded width is exactly max_len + 1
    ids = torch.randint(4, vocab, (batch, max_len + 1), generator=g)
    pos = torch.arange(max_len + 1)
    ids = torch.where(pos[None] == lengths[:, None], torch.full_like(ids, EOS), ids)
    return ids.masked_fill(pos[None] > lengths[:, None], PAD)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


@dataclass
class SelfTimed:
    """A contestant's result that carries its own timing (one run in another process, timed there with
    the same clock)."""

    seconds: float
    value: object = None


def interleaved(contestants: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                progress: bool = True, clock: str = "wall", pause: float = 0.3) -> dict[str, list[float]]:
    """Seconds per call of each contestant: `warmup` untimed rounds, then `repeats` timed rounds; each
    round calls every contestant once, the order reversed every other round. Between calls the script
    sleeps `pause` seconds (untimed), so that a thread pool which spins for a while after its last task
    (Intel OpenMP's default block time is 200 ms) cannot take cores from whoever runs next. (CTranslate2's
    larger in-process effect is handled by running it in its own process, see bench/translate.py.)

    clock "wall" is elapsed time; "cpu" is the CPU time of this process (all its threads), which other
    processes' load disturbs far less - but with several threads it also counts their spin-waiting,
    so use it with --threads 1."""
    names = list(contestants)
    times: dict[str, list[float]] = {n: [] for n in names}
    now = CLOCKS[clock]
    for r in range(warmup + repeats):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            time.sleep(pause)
            start = now()
            result = contestants[name]()
            elapsed = result.seconds if isinstance(result, SelfTimed) else now() - start
            if r >= warmup:
                times[name].append(elapsed)
        if progress:
            done = ", ".join(f"{n} {times[n][-1]:.3f}s" for n in names if times[n]) if r >= warmup else "warm-up"
            print(f"  round {r + 1}/{warmup + repeats}: {done}", file=sys.stderr, flush=True)
    return times


class OtherLoad:
    """Share of the machine's CPU time that other processes used while the block ran (from /proc/stat
    minus this process's own CPU time; Linux only, else None). On a shared machine, look at this before
    trusting a run: the interleaving evens out load across contestants, but heavy load still skews."""

    def __enter__(self) -> OtherLoad:
        self.start, self.share = self._sample(), None
        return self

    def __exit__(self, *exc) -> None:
        end = self._sample()
        if self.start is None or end is None:
            return
        (busy0, total0, own0), (busy1, total1, own1) = self.start, end
        if total1 > total0:
            ticks = os.sysconf("SC_CLK_TCK")
            self.share = max(0.0, (busy1 - busy0 - (own1 - own0) * ticks) / (total1 - total0))

    @staticmethod
    def _sample() -> tuple[int, int, float] | None:
        try:
            with open("/proc/stat") as f:
                values = list(map(int, f.readline().split()[1:]))
        except (OSError, ValueError):
            return None
        idle = values[3] + values[4]
        return sum(values) - idle, sum(values), time.process_time() + OtherLoad._children_seconds()

    @staticmethod
    def _children_seconds() -> float:
        """CPU seconds of this process's live child processes (benchmark workers are ours, not others')."""
        seconds = 0.0
        for task in Path("/proc/self/task").iterdir():
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for pid in children:
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                seconds += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        return seconds

    def __str__(self) -> str:
        return "unknown" if self.share is None else f"{100 * self.share:.0f}%"


class Neighbour:
    """One busy-loop process beside the block (`while :; do :; done`, as a laptop's browser tab or a server's other
    job would take a core): started through a shell that exits at once, so that it is not this process's child and
    OtherLoad counts it as another process's load."""

    def __enter__(self) -> Neighbour:
        out = subprocess.run(["sh", "-c", "sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
        self.pid = int(out.stdout.strip())
        time.sleep(0.5)  # let the scheduler settle it on a core
        return self

    def __exit__(self, *exc) -> None:
        os.kill(self.pid, signal.SIGKILL)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = lambda cells: "  ".join(str(c).rjust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


class FixedLength:
    """A model for nmt.search.run with EOS made impossible before step `length` (at `length` beam search forces it),
    so that every contestant does the same steps; everything else (`max_positions`, a static decoder's `fixed_rows`
    and `init_cache(..., rows=)`) is the wrapped model's."""

    def __init__(self, model, length: int, eos: int):
        self.model, self.length, self.eos = model, length, eos

    def __getattr__(self, name):
        return getattr(self.model, name)

    def decode_step(self, tokens, cache, need_attention=False):
        step = cache.step
        logits, attention = self.model.decode_step(tokens, cache, need_attention)
        if step < self.length:
            logits[:, self.eos] = float("-inf")
        return logits, attention
