"""`nmt explain`: one sentence walked through the Transformer in the order of "Attention Is All You Need", written
as ONE self-contained HTML page (nmt/explain/page.py draws it) from a plain JSON-able dict built here.

What the dict holds: the SentencePiece pieces and ids; the embeddings x sqrt(d_model) + positional encoding
(§3.4-3.5); every encoder layer (Q, K, V, equation 1 for one query with the model's numbers, every head's
attention, residual + LayerNorm, the feed-forward network); the decoder teacher-forced on the chosen translation
(masked self-attention, cross-attention); the output softmax at each step; and the beam search that chose the
translation (every step's candidates: kept, finished, pruned; the length penalty's effect). The numbers come from
the model's own modules, step by step (nmt/explain/numbers.py), checked against their forward passes; the beam is
nmt.search.run itself (the beam rule), traced, with the search settings `nmt translate` uses for the checkpoint.

Size budget (<= 2 MB for a 30-word sentence on a base model, d_model 512, 8 heads, 6 + 6 layers; bench/explain.py
measures it): vectors show their first SHOW (6) dimensions only; attention weights are bytes (0..255 of [0, 1]) in
base64, one byte per head, query and key, averaged down to 96 x 96 for a long input; the positional-encoding
picture covers the sentence's positions (at least 50), quantized alike; each softmax keeps its top-k; numbers
carry 4 significant digits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nmt import search
from nmt.config.experiment import Config, DecodeConfig, apply_dict
from nmt.data.batching import collate
from nmt.errors import NmtError
from nmt.explain.numbers import SHOW, positions_panel, rounded, walk
from nmt.rundir import checkpoint_file
from nmt.search import BeamStep, Hypothesis, length_penalty_divisor
from nmt.translation.translator import ModelOptions, Translator

VERSION = 1  # of the dict's layout (the page's renderer reads it)


def load(checkpoint: Path, beam: int | None = None, length_penalty: float | None = None) -> Translator:
    """The checkpoint as `nmt translate --checkpoint` opens it (its own search settings, these on top)."""
    changes = {k: v for k, v in (("beam", beam), ("length_penalty", length_penalty)) if v is not None}
    cfg = apply_dict(Config(), {"decode": changes}, origin="the options") if changes else Config()
    return Translator.load(checkpoint_file(checkpoint), cfg, ModelOptions(config_given=False))


def source_ids(translator: Translator, sentence: str, decode: DecodeConfig) -> tuple[list[int], list[str]]:
    """The ids the model reads for `sentence` (Translator.source_ids: prefix + pieces, truncated to the model's max
    input) and notes for the reader; an empty sentence is an error."""
    if not sentence.strip():
        raise NmtError("nothing to explain: the sentence is empty")
    ((ids, cut),) = translator.source_ids([sentence], decode)
    if len(ids) <= len(translator.prefix_ids(decode.prefix)):
        raise NmtError("nothing to explain: the sentence has no pieces after cleaning")
    limit, notes = translator.max_src(decode), []
    if cut:
        notes.append(f"the sentence has {cut} tokens; the model reads at most {limit}, so only the first "
                     f"{limit} are translated and explained (as `nmt translate` truncates it)")
    return ids, notes


def traced_search(translator: Translator, src: torch.Tensor, d: DecodeConfig) -> tuple[Hypothesis, list[BeamStep]]:
    """The search with the settings `nmt translate` uses, traced: always the beam rule (beam 1 included), all
    `beam` finished hypotheses kept, and every step traced."""
    ids = translator.special
    steps: list[BeamStep] = []
    hyps = search.run(translator.model, src, translator.search_settings(d, nbest=d.beam), ids, trace=steps.append)
    return hyps[0][0], steps


def beam_panel(steps: list[BeamStep], best: Hypothesis, pieces: Callable[[list[int]], list[str]],
               alpha: float, kind: str) -> dict[str, Any]:
    """Each step's 2 x beam candidates [parent beam, piece, cumulative log-prob, status] (the beams of a step are
    the previous step's kept candidates, in order), and every finished hypothesis with its length penalty."""
    rows, finished, beams = [], [], [[]]
    for step in steps:
        names = pieces(step.tokens[0])
        candidates, kept = [], []
        for parent, token, name, score, status in zip(step.parents[0], step.tokens[0], names, step.scores[0],
                                                      step.status[0]):
            candidates.append([parent, name, rounded(score), status])
            if status == "finished":
                finished.append((beams[parent], score, step.step))
            elif status == "kept":
                kept.append(beams[parent] + [token])
        rows.append({"step": step.step, "candidates": candidates, "done": step.done[0]})
        beams = kept
    out = []
    for tokens, logprob, at in finished:
        divisor = length_penalty_divisor(len(tokens) + 1, alpha, kind)
        out.append({"pieces": pieces(tokens), "length": len(tokens) + 1, "step": at, "logprob": rounded(logprob),
                    "divisor": rounded(divisor), "score": rounded(logprob / divisor),
                    "chosen": tokens == best.tokens and abs(logprob - best.logprob) < 1e-4})
    by_logprob = max(range(len(out)), key=lambda i: finished[i][1]) if out else None
    return {"steps": rows, "finished": out, "by_logprob": by_logprob, "alpha": alpha, "kind": kind,
            "chosen": next((i for i, f in enumerate(out) if f["chosen"]), None)}


def model_facts(translator: Translator, src_len: int, tgt_len: int) -> dict[str, Any]:
    """The model's sizes and choices (as the page's header states them) and this sentence's lengths."""
    m, model = translator.trained_config.get("model", {}), translator.model
    first = model.encoder_layers[0] if len(model.encoder_layers) else model.decoder_layers[0]
    return {"d_model": model.d_model, "n_heads": model.n_heads, "d_head": model.d_model // model.n_heads,
            "d_ff": first.ffn.w1.weight.size(0), "encoder_layers": len(model.encoder_layers),
            "decoder_layers": len(model.decoder_layers), "vocab": list(translator.vocab_sizes),
            "max_positions": model.max_positions, "pre_norm": bool(m.get("pre_norm", False)),
            "activation": m.get("activation", "relu"), "embed_scale": rounded(model.embed_scale),
            "src_len": src_len, "tgt_len": tgt_len, "precision": str(translator.precision), "show": SHOW}


def explain_sentence(translator: Translator, sentence: str, *, top_k: int = 5, query: int = 0,
                     decode: DecodeConfig | None = None) -> dict[str, Any]:
    """The page's data for one sentence: the translation `nmt translate` gives it (same search, same settings),
    the search that found it, and the forward pass that scores it. `decode`: this call's settings (default: the
    translator's)."""
    if top_k < 1:
        raise NmtError(f"--top-k must be at least 1, got {top_k}")
    started = time.perf_counter()
    d = decode or translator.decode
    ids, notes = source_ids(translator, sentence, d)
    tok, special = translator.tokenizer, translator.special
    src = collate([ids], [[]], pad=special.pad, bos=special.bos, eos=special.eos).src.to(translator.device)
    with torch.inference_mode():
        best, steps = traced_search(translator, src, d)
    tgt_in = torch.tensor([[special.bos, *best.tokens]], device=translator.device)
    targets = [*best.tokens, special.eos]
    data = walk(translator.model, src, tgt_in, targets, tok.tgt_pieces, banned={special.pad, special.bos},
                query=max(0, query), top_k=top_k)
    translation = tok.decode_tgt([best.tokens])[0]
    return {
        "version": VERSION, "sentence": sentence, "translation": translation, "notes": notes,
        "model": model_facts(translator, src.size(1), tgt_in.size(1)),
        "decode": {"beam": d.beam, "length_penalty": d.length_penalty, "length_penalty_type": d.length_penalty_type,
                   "max_len_a": d.max_len_a, "max_len_b": d.max_len_b},
        "source": {"pieces": tok.src_id_pieces(ids) + ["</s>"], "ids": [*ids, special.eos]},
        "target": {"pieces": ["<s>", *tok.tgt_pieces(best.tokens)], "ids": tgt_in[0].tolist(),
                   "next": tok.tgt_pieces(best.tokens) + ["</s>"]},
        "positions": positions_panel(translator.model, max(src.size(1), tgt_in.size(1)),
                                     translator.trained_config.get("model", {}).get("position_layout", "interleaved")),
        **data,
        "beam": beam_panel(steps, best, tok.tgt_pieces, d.length_penalty, d.length_penalty_type),
        "search_logprob": rounded(best.logprob), "seconds": rounded(time.perf_counter() - started),
    }


def default_output(checkpoint: Path) -> Path:
    """Beside the checkpoint: RUN/explain.html for a run dir or a checkpoint in it."""
    return (checkpoint if checkpoint.is_dir() else checkpoint.parent) / "explain.html"


def summary(data: dict[str, Any], page: Path) -> str:
    """The terminal's few lines: the translation, the page, the key shapes."""
    m, src, tgt = data["model"], data["source"]["pieces"], data["target"]["pieces"]
    S, T, H, Dh = len(src), len(tgt), m["n_heads"], m["d_head"]
    lines = [f"source       {' '.join(src)}  ({S} pieces)", f"translation  {data['translation']}",
             f"shapes       embeddings [{S}, {m['d_model']}]; Q, K, V [{H} heads, {S}, {Dh}] in each of "
             f"{m['encoder_layers']} encoder layers; FFN hidden [{S}, {m['d_ff']}]; decoder input [{T}, "
             f"{m['d_model']}]; logits [{T}, {m['vocab'][1]}]",
             f"beam         {data['decode']['beam']}, {len(data['beam']['steps'])} steps, "
             f"{len(data['beam']['finished'])} finished hypotheses",
             *[f"note         {n}" for n in data["notes"]],
             f"wrote        {page} ({page.stat().st_size / 1024:,.0f} KB)"]
    return "\n".join(lines)


def run(checkpoint: Path, sentence: str, *, output: Path | None = None, beam: int | None = None,
        length_penalty: float | None = None, top_k: int = 5, query: int = 0) -> tuple[dict[str, Any], Path]:
    """The `nmt explain` command: returns the data and the page written."""
    from nmt.explain.page import write_page

    if not sentence.strip():  # before loading a model
        raise NmtError("nothing to explain: the sentence is empty")
    translator = load(checkpoint, beam, length_penalty)
    data = explain_sentence(translator, sentence, top_k=top_k, query=query)
    page = write_page(data, output or default_output(checkpoint))
    return data, page
