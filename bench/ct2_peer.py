"""The CTranslate2 contestants of bench/translate.py: the Marian model converted with CTranslate2's own
Transformers converter (`ct2`), our model exported by `nmt export --to ct2` (`ct2-nmt`), and the worker process
that runs and times either."""

from __future__ import annotations

import atexit
import json
import multiprocessing as mp
import os
import sys
from pathlib import Path

import torch
from common import CLOCKS, SelfTimed

from nmt.threads import users_environment
from nmt.tokenizer import NMT_IDS


def ct2_model(hf_model, workdir: str) -> tuple[str, list[str]] | None:
    """Convert the Marian model with CTranslate2's Transformers converter: (model dir, vocabulary), or None
    if ctranslate2 is not installed. The converter wants a tokenizer only for the vocabulary and special
    tokens, so it gets a stub."""
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        return None
    vocab = hf_model.config.vocab_size
    names = ["<blank>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, vocab - 1)] + ["<pad>"]

    class StubTokenizer:
        eos_token, unk_token, bos_token = "</s>", "<unk>", "<s>"

        def get_vocab(self):
            return {name: i for i, name in enumerate(names)}

    class Converter(TransformersConverter):
        def load_tokenizer(self, *args, **kwargs):
            return StubTokenizer()

    # Marian's converter drops the last vocabulary entry (HF's appended <pad>), hence `names` ends with it.
    hf_dir, ct2_dir = f"{workdir}/hf", f"{workdir}/ct2"
    hf_model.save_pretrained(hf_dir)
    Converter(hf_dir).convert(ct2_dir, force=True)
    return ct2_dir, names


def ct2_marian(model_dir: Path, workdir: str) -> tuple[str, list[str]] | None:
    """A Marian directory converted as CTranslate2 users do (its real tokenizer included), or None."""
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        return None
    vocab = json.loads((model_dir / "vocab.json").read_text(encoding="utf-8"))
    ct2_dir = f"{workdir}/ct2"
    TransformersConverter(str(model_dir)).convert(ct2_dir, force=True)
    return ct2_dir, sorted(vocab, key=vocab.get)


def _ct2_worker(conn, model_dir: str, device: str, index: int, compute_type: str, threads: int,
                tokens: list[list[str]], length: int, clock: str, beam: int, alpha: float) -> None:
    """Serves timed translate_batch calls. CTranslate2 runs in its own process because its Intel OpenMP
    pool, once used, slows PyTorch's GNU OpenMP pool in the same process about 2x (measured on the
    elementwise add of a [128, 8000] tensor: 149 -> 283 us), which would handicap ours and HF."""
    import ctranslate2

    try:
        translator = ctranslate2.Translator(model_dir, device=device, device_index=index,
                                            compute_type=compute_type, inter_threads=1, intra_threads=threads)
        # ready only once it has translated: on a CUDA 13 machine the PyPI wheel loads, then fails at the first
        # translation for want of libcublas.so.12 (OpenNMT/CTranslate2 #1933)
        translator.translate_batch(tokens[:1], beam_size=1, max_decoding_length=2)
    except (RuntimeError, ValueError, OSError) as e:  # a build without CUDA, no bf16 on this GPU, no cuBLAS 12...
        conn.send(str(e).splitlines()[0] if str(e) else type(e).__name__)
        return
    conn.send("ready")
    now = CLOCKS[clock]
    try:
        while conn.recv() == "run":
            start = now()
            result = translator.translate_batch(tokens, beam_size=beam, length_penalty=alpha, max_batch_size=0,
                                                min_decoding_length=length + 1, max_decoding_length=length + 1)
            conn.send((now() - start, [len(r.hypotheses[0]) for r in result]))
    except (EOFError, OSError):  # the bench was killed: without this, CTranslate2's threads outlive it, spinning
        pass
    finally:
        os._exit(0)


class NamedVocab:
    """What nmt.interop.modelspec.describe reads of a tokenizer, for a random-weight model without a SentencePiece
    model: made-up pieces with nmt's special ids."""

    joint, src_lang, tgt_lang, normalize, special_ids = True, "src", "tgt", None, NMT_IDS

    def __init__(self, names: list[str]):
        self.names, self.src_vocab_size, self.tgt_vocab_size = names, len(names), len(names)

    def src_id_pieces(self, ids: list[int]) -> list[str]:
        return [self.names[i] for i in ids]

    tgt_pieces = src_id_pieces


def ct2_export(model, cfg, vocab: int, ckpt, workdir: str, dtype: str) -> tuple[str, list[str]] | None:
    """Our model as `nmt export --to ct2` writes it (nmt.interop.export.ct2.convert over
    nmt.interop.modelspec.describe): (model dir, vocabulary), or None if ctranslate2 is not installed. `ckpt`: the
    imported checkpoint of a Marian config, else None (a checkpoint of the random weights is made up, with NamedVocab as
    its tokenizer)."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return None
    from nmt.checkpoint import Checkpoint
    from nmt.config.experiment import Config
    from nmt.interop.export.ct2 import convert
    from nmt.interop.modelspec import describe

    if ckpt is None:
        names = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, vocab)]

        class Stub(Checkpoint):
            def tokenizer(self):
                return NamedVocab(names)

        ckpt = Stub(model=model.state_dict(), config=Config(model=cfg).to_dict(), vocab={"src": vocab, "tgt": vocab},
                    langs=["src", "tgt"])
    description = describe(ckpt)
    out = Path(workdir) / "ct2-nmt"
    convert(description, out, "int8" if dtype == "int8" else None)
    return str(out), description.src_vocab


def ct2_fn(ct2, src, length, device: torch.device, compute_type: str, threads: int, clock: str, pad: int,
           search: tuple[int, float], eos: int | None = None):
    """(run, check) of CTranslate2 on `device` in a worker process, or None (with a note) where it cannot load.
    `search`: (beam, length penalty); `eos`: the id left out of the sources, where the model appends EOS itself
    (nmt's export)."""
    model_dir, names = ct2
    tokens = [[names[i] for i in row if i not in (pad, eos)] for row in src.tolist()]
    ctx = mp.get_context("spawn")
    conn, child_conn = ctx.Pipe()
    proc = ctx.Process(target=_ct2_worker, daemon=True, args=(child_conn, model_dir, device.type, device.index or 0,
                                                              compute_type, threads, tokens, length, clock, *search))
    with users_environment():  # CTranslate2 as its users run it: OpenMP's defaults, not the policy nmt chose
        proc.start()
    child_conn.close()  # the child's end: once the child is gone too, recv() ends with EOFError, not a hang
    try:
        status = conn.recv()
    except EOFError:  # it died without a word (an abort in a library it loaded)
        proc.join(10)
        status = f"its process ended with exit code {proc.exitcode}"
    if status != "ready":
        proc.join(10)
        print(f"ctranslate2 cannot run on {device} in {compute_type} ({status.rstrip('.')}): skipping it",
              file=sys.stderr)
        return None
    atexit.register(lambda: (conn.send("stop"), proc.join(10)) if proc.is_alive() else None)

    def run():
        conn.send("run")
        seconds, lengths = conn.recv()
        return SelfTimed(seconds, lengths)

    def check(result):  # CT2 returns L + 1 tokens (see the module docstring)
        return all(n == length + 1 for n in result.value)

    return run, check
