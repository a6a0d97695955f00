"""SentencePiece subword models: training, encoding/decoding, and storage as bytes.

A `Tokenizer` is built from serialized model bytes, so it can live inside a checkpoint
(`to_state`/`from_state`) and be pickled to `datasets.map` worker processes. Ids never include
BOS/EOS: batching adds them. Where the files live in a data dir is nmt.datadir's business.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from typing import Any

import sentencepiece as spm

from nmt.corpus import clean_text, normalize
from nmt.errors import NmtError, first_line


@dataclass(frozen=True)
class SpecialIds:
    """Ids with a fixed role. Everything downstream (batching, model, search) takes them from the
    tokenizer of the data dir or checkpoint, never as literals."""

    pad: int
    unk: int
    bos: int
    eos: int


NMT_IDS = SpecialIds(pad=0, unk=1, bos=2, eos=3)  # the ids of every SentencePiece model nmt trains


def train_spm(sentences: Iterable[str], vocab_size: int, model_type: str = "bpe",
              character_coverage: float = 1.0, seed: int = 1, sample_cap: int = 2_000_000) -> bytes:
    """Train a SentencePiece model on a stream of sentences; returns the serialized model.

    The stream is consumed once; SentencePiece keeps a uniform reservoir sample of at most
    `sample_cap` sentences over the whole stream, so memory does not grow with the corpus. The
    sample is deterministic (sentencepiece 0.2's sampler does not even depend on `seed`, which
    still fixes SentencePiece's other randomness).
    """
    spm.set_random_generator_seed(seed)
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=writer, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage,
            pad_id=NMT_IDS.pad, unk_id=NMT_IDS.unk, bos_id=NMT_IDS.bos, eos_id=NMT_IDS.eos,
            input_sentence_size=sample_cap, shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1, minloglevel=2,
        )
    except (RuntimeError, ValueError, SyntaxError) as e:  # an unknown option value: ValueError, SyntaxError < 0.2.3
        raise NmtError(_spm_error(str(e), vocab_size)) from None
    return writer.getvalue()


def _spm_error(message: str, vocab_size: int) -> str:
    if "too high" in message or "too large" in message:
        match = re.search(r"<=\s*(\d+)", message)
        limit = f" (max {match.group(1)})" if match else ""
        return f"vocab size {vocab_size} is too large for this data{limit}; lower data.vocab_size"
    if "smaller than required_chars" in message:
        match = re.search(r"(\d+) vs (\d+)", message)
        need = f" (needs at least {match.group(2)})" if match else ""
        return (f"vocab size {vocab_size} is too small for this data{need}; "
                "raise data.vocab_size or lower data.character_coverage")
    return f"SentencePiece training failed: {first_line(message)}"


def _processor(model: bytes, what: str) -> spm.SentencePieceProcessor:
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (RuntimeError, TypeError, OSError) as e:
        raise NmtError(f"{what} is not a valid SentencePiece model ({e})") from None
    found = SpecialIds(processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    if found != NMT_IDS:
        raise NmtError(f"{what} has special ids pad/unk/bos/eos={astuple(found)}, expected {astuple(NMT_IDS)}")
    return processor


def _sanitize(line: str) -> str:
    # Lone surrogates (e.g. from surrogateescape'd stdin) cannot be UTF-8 encoded for SentencePiece.
    return line.encode("utf-8", "replace").decode("utf-8")


class Tokenizer:
    """Source/target SentencePiece models; `tgt_model=None` means one joint model for both sides.

    `normalize` is the Unicode form the training data was normalized with; `encode_*` applies it
    (and the corpus line cleaning) so text at translation time is treated like the training data.
    """

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None, *, src_lang: str = "src",
                 tgt_lang: str = "tgt", normalize: str | None = None) -> None:
        self._src_model, self._tgt_model = bytes(src_model), None if tgt_model is None else bytes(tgt_model)
        self.src_lang, self.tgt_lang, self.normalize = src_lang, tgt_lang, normalize
        self._load()

    def _load(self) -> None:
        self._src = _processor(self._src_model, "source tokenizer model")
        joint = self._tgt_model is None
        self._tgt = self._src if joint else _processor(self._tgt_model, "target tokenizer model")

    # -- properties
    @property
    def joint(self) -> bool:
        return self._tgt_model is None

    @property
    def special_ids(self) -> SpecialIds:
        return SpecialIds(self._tgt.pad_id(), self._tgt.unk_id(), self._tgt.bos_id(), self._tgt.eos_id())

    @property
    def src_vocab_size(self) -> int:
        return self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self._tgt.get_piece_size()

    # -- encoding / decoding
    def _prepare(self, lines: list[str], clean: bool) -> list[str]:
        if not clean:
            return list(lines)
        return [normalize(clean_text(line), self.normalize) for line in lines]

    def _encode(self, processor: spm.SentencePieceProcessor, lines: list[str],
                clean: bool) -> list[list[int]]:
        texts = self._prepare(lines, clean)
        try:
            return processor.encode(texts, out_type=int)
        except (UnicodeEncodeError, TypeError):
            return processor.encode([_sanitize(str(t)) for t in texts], out_type=int)

    def encode_src(self, lines: list[str], *, clean: bool = True) -> list[list[int]]:
        """Source lines → ids (no BOS/EOS). `clean=False` skips cleaning for already-clean text."""
        return self._encode(self._src, lines, clean)

    def encode_tgt(self, lines: list[str], *, clean: bool = True) -> list[list[int]]:
        return self._encode(self._tgt, lines, clean)

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Target ids → text. Stops at the first EOS; drops PAD/BOS and ids outside the vocabulary."""
        size, special = self.tgt_vocab_size, self.special_ids
        kept = []
        for seq in ids:
            seq = [int(i) for i in seq]
            if special.eos in seq:
                seq = seq[:seq.index(special.eos)]
            kept.append([i for i in seq if i not in (special.pad, special.bos) and 0 <= i < size])
        return self._tgt.decode(kept) if kept else []

    def src_pieces(self, line: str) -> list[str]:
        return self._src.encode(_sanitize(normalize(clean_text(line), self.normalize)), out_type=str)

    def src_id_pieces(self, ids: list[int]) -> list[str]:
        size = self.src_vocab_size
        return [self._src.id_to_piece(int(i)) if 0 <= int(i) < size else "<invalid>" for i in ids]

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        size = self.tgt_vocab_size
        return [self._tgt.id_to_piece(int(i)) if 0 <= int(i) < size else "<invalid>" for i in ids]

    # -- storage
    def to_state(self) -> dict[str, Any]:
        """Plain dict of bytes/str (checkpoint-friendly, works with torch.load(weights_only=True))."""
        return {"src_model": self._src_model, "tgt_model": self._tgt_model, "src_lang": self.src_lang,
                "tgt_lang": self.tgt_lang, "normalize": self.normalize}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Tokenizer:
        if not isinstance(state, dict) or not isinstance(state.get("src_model"), (bytes, bytearray)):
            raise NmtError("tokenizer state is missing or corrupt (no source model bytes)")
        return cls(state["src_model"], state.get("tgt_model"), src_lang=state.get("src_lang", "src"),
                   tgt_lang=state.get("tgt_lang", "tgt"), normalize=state.get("normalize"))

    def __getstate__(self) -> dict[str, Any]:
        return self.to_state()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._src_model, self._tgt_model = state["src_model"], state["tgt_model"]
        self.src_lang, self.tgt_lang = state["src_lang"], state["tgt_lang"]
        self.normalize = state["normalize"]
        self._load()

    def __repr__(self) -> str:
        kind = "joint" if self.joint else "separate"
        return f"Tokenizer({kind}, src_vocab={self.src_vocab_size}, tgt_vocab={self.tgt_vocab_size})"
