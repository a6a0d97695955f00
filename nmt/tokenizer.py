"""SentencePiece subword models: training, encoding/decoding, and storage as bytes.

A `Tokenizer` is built from serialized model bytes, so it can live inside a checkpoint
(`to_state`/`from_state`) and be pickled to encoding worker processes. Ids never include
BOS/EOS: batching adds them. Where the files live in a data dir is nmt.data.datadir's business.

Ids are SentencePiece's own for the models nmt trains. Imported models (Marian / OPUS-MT) number
their pieces in a vocabulary of their own (`vocab.json`): given `src_vocab` (and `tgt_vocab` when
the two sides have separate vocabularies), pieces are mapped through it, pieces outside it are
`<unk>`, and the special ids are those of its `<pad>`, `<unk>` and `</s>` entries.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass
from typing import Any

import sentencepiece as spm

from nmt.errors import NmtError, first_line
from nmt.text import clean_text, normalize


@dataclass(frozen=True)
class SpecialIds:
    """Ids with a fixed role. Everything downstream (batching, model, search) takes them from the
    tokenizer of the data dir or checkpoint, never as literals."""

    pad: int
    unk: int
    bos: int
    eos: int


NMT_IDS = SpecialIds(pad=0, unk=1, bos=2, eos=3)  # the ids of every SentencePiece model nmt trains


def train_spm(sentences: Iterable[str], vocab_size: int, model_type: str = "bpe", character_coverage: float = 1.0,
              seed: int = 1, sample_cap: int = 2_000_000, byte_fallback: bool = False,
              normalization: str = "nmt_nfkc") -> bytes:
    """Train a SentencePiece model on a stream of sentences; returns the serialized model.

    The stream is consumed once; SentencePiece keeps a uniform reservoir sample of at most
    `sample_cap` sentences over the whole stream, so memory does not grow with the corpus. The
    sample is deterministic (sentencepiece 0.2's sampler does not even depend on `seed`, which
    still fixes SentencePiece's other randomness). With `byte_fallback` a character outside the vocabulary is
    encoded as its UTF-8 bytes (256 pieces of the vocabulary), which decoding joins back: nothing becomes <unk>.
    `normalization`: SentencePiece's own rule (nmt_nfkc folds full-width forms to ASCII; identity keeps the text).
    """
    spm.set_random_generator_seed(seed)
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=writer, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage, byte_fallback=byte_fallback,
            normalization_rule_name=normalization,
            pad_id=NMT_IDS.pad, unk_id=NMT_IDS.unk, bos_id=NMT_IDS.bos, eos_id=NMT_IDS.eos,
            input_sentence_size=sample_cap, shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1, minloglevel=2,
        )
    except (RuntimeError, ValueError, SyntaxError) as e:  # an unknown option value: ValueError, SyntaxError < 0.2.3
        raise NmtError(_spm_error(str(e), vocab_size, byte_fallback)) from None
    return writer.getvalue()


def _spm_error(message: str, vocab_size: int, byte_fallback: bool = False) -> str:
    if "too high" in message or "too large" in message:
        match = re.search(r"<=\s*(\d+)", message)
        limit = f" (max {match.group(1)})" if match else ""
        return f"vocab size {vocab_size} is too large for this data{limit}; lower data.vocab_size"
    if "smaller than required_chars" in message:
        match = re.search(r"(\d+) vs (\d+)", message)
        need = f" (needs at least {match.group(2)})" if match else ""
        freed = " or data.byte_fallback=false (its 256 byte pieces)" if byte_fallback else ""
        return (f"vocab size {vocab_size} is too small for this data's characters{need}; "
                f"raise data.vocab_size, or lower data.character_coverage{freed}")
    return f"SentencePiece training failed: {first_line(message)}"


def _processor(model: bytes, what: str, own_ids: bool = True) -> spm.SentencePieceProcessor:
    """A loaded SentencePiece model; `own_ids`: its ids are the model's, so they must be nmt's special ids."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (RuntimeError, TypeError, OSError) as e:
        raise NmtError(f"{what} is not a valid SentencePiece model ({e})") from None
    found = SpecialIds(processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    if own_ids and found != NMT_IDS:
        raise NmtError(f"{what} has special ids pad/unk/bos/eos={astuple(found)}, expected {astuple(NMT_IDS)}")
    return processor


# The entries of an imported vocabulary with a fixed role. Decoding starts from <pad> (Marian's
# decoder start token), so there BOS is PAD.
VOCAB_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "eos": "</s>"}


def _vocab_ids(vocab: list[str], what: str) -> SpecialIds:
    index = {piece: i for i, piece in enumerate(vocab)}
    missing = [piece for piece in VOCAB_SPECIALS.values() if piece not in index]
    if missing:
        raise NmtError(f"{what} lacks the special entries {', '.join(missing)}")
    pad = index["<pad>"]
    return SpecialIds(pad=pad, unk=index["<unk>"], bos=pad, eos=index["</s>"])


def language_code(line: str) -> tuple[str | None, str]:
    """A leading target-language code `>>xx<<` (multilingual OPUS-MT models) split from the text, as
    Marian's tokenizer does: it is one vocabulary entry, never cut into pieces."""
    if line.startswith(">>") and (end := line.find("<<")) != -1:
        return line[: end + 2], line[end + 2:]
    return None, line


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _sanitize(line: str) -> str:
    # Lone surrogates (e.g. from surrogateescape'd stdin) cannot be UTF-8 encoded for SentencePiece.
    return line.encode("utf-8", "replace").decode("utf-8")


# SentencePiece hands a list to a thread pool, a fixed cost of milliseconds a call whatever its size (one line
# alone takes microseconds in the calling thread), which one-sentence server requests would pay twice each
SPM_POOL_FROM = 64  # lines


def _spm_map(method: Callable, items: list, **kwargs: Any) -> list:
    """processor.encode/decode over a list: line by line in this thread for short lists, else SentencePiece's pool."""
    if len(items) < SPM_POOL_FROM:
        return [method(item, **kwargs) for item in items]
    return method(items, **kwargs)


class Tokenizer:
    """Source/target SentencePiece models; `tgt_model=None` means one model for both sides. With
    `src_vocab` (an imported model's vocabulary, pieces in id order), ids are positions in it, and
    `tgt_vocab=None` means one vocabulary for both sides even when the sides have two models.

    `normalize` is the Unicode form the training data was normalized with; `encode_*` applies it
    (and the corpus line cleaning) so text at translation time is treated like the training data.
    """

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None, *, src_lang: str = "src",
                 tgt_lang: str = "tgt", normalize: str | None = None, src_vocab: list[str] | None = None,
                 tgt_vocab: list[str] | None = None) -> None:
        self._src_model, self._tgt_model = bytes(src_model), None if tgt_model is None else bytes(tgt_model)
        self.src_lang, self.tgt_lang, self.normalize = src_lang, tgt_lang, normalize
        if tgt_vocab is not None and src_vocab is None:
            raise NmtError("a target vocabulary needs a source vocabulary")
        self.src_vocab = None if src_vocab is None else [str(piece) for piece in src_vocab]
        self.tgt_vocab = None if tgt_vocab is None else [str(piece) for piece in tgt_vocab]
        self._load()

    def _load(self) -> None:
        mapped = self.src_vocab is not None
        self._src = _processor(self._src_model, "source tokenizer model", own_ids=not mapped)
        self._tgt = self._src if self._tgt_model is None else _processor(
            self._tgt_model, "target tokenizer model", own_ids=not mapped)
        self._index: dict[str, dict[str, int]] = {}
        if self.src_vocab is not None:
            vocabs = {"src": self.src_vocab, "tgt": self.tgt_vocab or self.src_vocab}
            self._index = {side: {piece: i for i, piece in enumerate(v)} for side, v in vocabs.items()}
            self._special = _vocab_ids(vocabs["tgt"], "target vocabulary")
            if _vocab_ids(vocabs["src"], "source vocabulary").pad != self._special.pad:
                raise NmtError("source and target vocabularies put <pad> at different ids")

    # -- properties
    @property
    def mapped(self) -> bool:
        """Ids come from an imported vocabulary, not from SentencePiece."""
        return self.src_vocab is not None

    @property
    def joint(self) -> bool:
        """One id space for both sides (what lets the model share the source and target embeddings)."""
        return self.tgt_vocab is None if self.mapped else self._tgt_model is None

    @property
    def special_ids(self) -> SpecialIds:
        if self.mapped:
            return self._special
        return SpecialIds(self._tgt.pad_id(), self._tgt.unk_id(), self._tgt.bos_id(), self._tgt.eos_id())

    @property
    def src_vocab_size(self) -> int:
        return len(self._index["src"]) if self.mapped else self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return len(self._index["tgt"]) if self.mapped else self._tgt.get_piece_size()

    def src_piece_id(self, piece: str) -> int | None:
        """The source id of one vocabulary entry (e.g. a language code `>>fra<<`), None if there is none."""
        if self.mapped:
            return self._index["src"].get(piece)
        i = self._src.piece_to_id(piece)
        return None if i == self._src.unk_id() else i

    def language_codes(self) -> list[str]:
        """The target-language codes (`>>xx<<`) of the source vocabulary: a multilingual model's targets."""
        return [p for p in self._index.get("src", {}) if p.startswith(">>") and p.endswith("<<")]

    # -- encoding / decoding
    def _prepare(self, lines: list[str], clean: bool) -> list[str]:
        if not clean:
            return list(lines)
        return [normalize(clean_text(line), self.normalize) for line in lines]

    def _spm_encode(self, processor: spm.SentencePieceProcessor, texts: list[str], out_type: type) -> list[list]:
        try:
            return _spm_map(processor.encode, texts, out_type=out_type)
        except (UnicodeEncodeError, TypeError, RuntimeError):  # a lone surrogate: RuntimeError line by line
            return _spm_map(processor.encode, [_sanitize(str(t)) for t in texts], out_type=out_type)

    def _encode(self, side: str, lines: list[str], clean: bool) -> list[list[int]]:
        processor = self._src if side == "src" else self._tgt
        texts = self._prepare(lines, clean)
        if not self.mapped:
            return self._spm_encode(processor, texts, int)
        split = [language_code(t) if side == "src" else (None, t) for t in texts]
        pieces = self._spm_encode(processor, [text for _, text in split], str)
        index, unk = self._index[side], self._special.unk
        return [[index.get(p, unk) for p in ([code] if code else []) + seq] for (code, _), seq in zip(split, pieces)]

    def encode_src(self, lines: list[str], *, clean: bool = True) -> list[list[int]]:
        """Source lines → ids (no BOS/EOS). `clean=False` skips cleaning for already-clean text."""
        return self._encode("src", lines, clean)

    def encode_tgt(self, lines: list[str], *, clean: bool = True) -> list[list[int]]:
        return self._encode("tgt", lines, clean)

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Target ids → text. Stops at the first EOS; drops PAD/BOS and ids outside the vocabulary (with an
        imported vocabulary also <unk>, as its own tokenizer does when it skips special tokens)."""
        size, special = self.tgt_vocab_size, self.special_ids
        dropped = {special.pad, special.bos} | ({special.unk} if self.mapped else set())
        kept = []
        for seq in ids:
            seq = [int(i) for i in seq]
            if special.eos in seq:
                seq = seq[:seq.index(special.eos)]
            kept.append([i for i in seq if i not in dropped and 0 <= i < size])
        if not self.mapped:
            return _spm_map(self._tgt.decode, kept) if kept else []
        vocab = self.tgt_vocab or self.src_vocab or []
        # pieces SentencePiece does not know come out as they are, "▁" included: Marian's tokenizer maps it too
        return [self._tgt.decode_pieces([vocab[i] for i in seq]).replace("\u2581", " ").strip() for seq in kept]

    def src_pieces(self, line: str) -> list[str]:
        code, text = language_code(line) if self.mapped else (None, line)
        pieces = self._src.encode(_sanitize(normalize(clean_text(text), self.normalize)), out_type=str)
        return ([code] if code else []) + pieces

    def _id_pieces(self, side: str, ids: list[int]) -> list[str]:
        size = self.src_vocab_size if side == "src" else self.tgt_vocab_size
        if self.mapped:
            vocab = (self.src_vocab if side == "src" else self.tgt_vocab) or self.src_vocab or []
            return [vocab[int(i)] if 0 <= int(i) < size else "<invalid>" for i in ids]
        processor = self._src if side == "src" else self._tgt
        return [processor.id_to_piece(int(i)) if 0 <= int(i) < size else "<invalid>" for i in ids]

    def src_id_pieces(self, ids: list[int]) -> list[str]:
        return self._id_pieces("src", ids)

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        return self._id_pieces("tgt", ids)

    # -- storage
    def fingerprint(self) -> dict[str, Any]:
        """What identifies this tokenizer (two with equal fingerprints encode every text alike), as JSON-able
        values: checksums of the models, the vocabularies and the normalization."""
        return {"src_model": _sha256(self._src_model), "tgt_model": _sha256(self._tgt_model),
                "src_vocab": self.src_vocab, "tgt_vocab": self.tgt_vocab, "normalize": self.normalize}

    def to_state(self) -> dict[str, Any]:
        """Plain dict of bytes/str (checkpoint-friendly, works with torch.load(weights_only=True); on torch 2.4
        once nmt.checkpoint is imported, which allows bytes there)."""
        return {"src_model": self._src_model, "tgt_model": self._tgt_model, "src_lang": self.src_lang,
                "tgt_lang": self.tgt_lang, "normalize": self.normalize, "src_vocab": self.src_vocab,
                "tgt_vocab": self.tgt_vocab}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Tokenizer:
        if not isinstance(state, dict) or not isinstance(state.get("src_model"), (bytes, bytearray)):
            raise NmtError("tokenizer state is missing or corrupt (no source model bytes)")
        return cls(state["src_model"], state.get("tgt_model"), src_lang=state.get("src_lang", "src"),
                   tgt_lang=state.get("tgt_lang", "tgt"), normalize=state.get("normalize"),
                   src_vocab=state.get("src_vocab"), tgt_vocab=state.get("tgt_vocab"))

    def __getstate__(self) -> dict[str, Any]:
        return self.to_state()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._src_model, self._tgt_model = state["src_model"], state["tgt_model"]
        self.src_lang, self.tgt_lang = state["src_lang"], state["tgt_lang"]
        self.normalize = state["normalize"]
        self.src_vocab, self.tgt_vocab = state.get("src_vocab"), state.get("tgt_vocab")
        self._load()

    def __repr__(self) -> str:
        kind = ("joint" if self.joint else "separate") + (", imported vocabulary" if self.mapped else "")
        return f"Tokenizer({kind}, src_vocab={self.src_vocab_size}, tgt_vocab={self.tgt_vocab_size})"
