"""A small Hugging Face Marian model built in the tests (tests/interop/test_marian.py's, and the committed one of
tests/fixtures/make_marian_model.py): SentencePiece models trained on the demo corpus, a MarianMTModel of Marian's
shape (swish, sin/cos halves, scaled embeddings, <pad> last), save_pretrained of it and its MarianTokenizer, and a few
hundred updates of training. Needs transformers and sentencepiece: import it after
pytest.importorskip("transformers")."""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm
import torch
import transformers


def train_spm(lines: list[str], size: int) -> bytes:
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=size,
                                   minloglevel=2)  # SentencePiece's own ids: Marian's are in vocab.json
    return out.getvalue()


def spm_pieces(model: bytes) -> list[str]:
    p = spm.SentencePieceProcessor()
    p.LoadFromSerializedProto(model)
    return [p.id_to_piece(i) for i in range(p.get_piece_size()) if not (p.is_control(i) or p.is_unknown(i))]


def marian_config(src_size: int, tgt_size: int, pad: int, shared: bool):
    return transformers.MarianConfig(
        vocab_size=src_size, decoder_vocab_size=tgt_size, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        activation_function="swish", scale_embedding=True, pad_token_id=pad, eos_token_id=0,
        decoder_start_token_id=pad, forced_eos_token_id=0, max_position_embeddings=128,
        share_encoder_decoder_embeddings=shared)


def save(directory: Path, model, src_spm: bytes, tgt_spm: bytes, vocab: list[str],
         tgt_vocab: list[str] | None = None):
    """save_pretrained of the model and of a MarianTokenizer over these files; returns the tokenizer."""
    directory.mkdir(parents=True)
    files = directory / "in"
    files.mkdir()
    (files / "source.spm").write_bytes(src_spm)
    (files / "target.spm").write_bytes(tgt_spm)
    (files / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(vocab)}))
    extra = {}
    if tgt_vocab is not None:
        (files / "target_vocab.json").write_text(json.dumps({p: i for i, p in enumerate(tgt_vocab)}))
        extra = dict(target_vocab_file=str(files / "target_vocab.json"), separate_vocabs=True)
    tok = transformers.MarianTokenizer(str(files / "source.spm"), str(files / "target.spm"), str(files / "vocab.json"),
                                       **extra)
    tok.punc_normalizer = lambda text: text  # Moses punctuation normalization only if sacremoses is installed
    model.generation_config.bad_words_ids = [[model.config.pad_token_id]]  # as OPUS-MT's generation config
    model.save_pretrained(directory / "hf")
    tok.save_pretrained(directory / "hf")
    return tok


def train_marian(model, tok, en: list[str], de: list[str], steps: int = 200, batch: int = 64) -> None:
    """A few hundred updates: enough for translations that end with EOS before the length limit."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for step in range(steps):
        i = (step * batch) % (len(en) - batch)
        inputs = tok(en[i:i + batch], text_target=de[i:i + batch], return_tensors="pt", padding=True)
        inputs["labels"][inputs["labels"] == model.config.pad_token_id] = -100
        loss = model(**inputs).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
