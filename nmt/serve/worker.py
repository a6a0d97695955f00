"""The model side of `nmt serve`: one thread loads the model (while the server already answers /health), then
does all inference there, the batches nmt.serve.batcher forms; the asyncio side only validates, queues and awaits.
Needs no FastAPI."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from nmt.config.experiment import Config, DecodeConfig, ServeConfig
from nmt.errors import NmtError, first_line
from nmt.log import console
from nmt.serve.batcher import Batcher
from nmt.translation import terminology
from nmt.translation.glossary import Glossary
from nmt.translation.translator import ModelOptions, Translation, Translator
from nmt.workbudget import WorkBudget, bounded


@dataclass
class ServeOptions(ModelOptions):
    checkpoints: list[Path] = field(default_factory=list)  # one model each (ModelOptions.checkpoint: unused)
    api_key: str | None = None
    access_log: bool = True


class Search(NamedTuple):
    """What a batch shares: sentences that ask for other search settings go into other batches."""

    decode: DecodeConfig  # the model's settings with the request's beam and n-best
    attention: bool = False  # the cross-attention of each best hypothesis (the web page's heatmap)
    explain: tuple[int, int] | None = None  # (top_k, query): nmt.explain.command's data instead of a Translation
    glossary: Glossary | None = None  # terms the translations must hold (the server's and the request's)


@dataclass
class Model:
    """What the model thread loaded."""

    translator: Translator
    checkpoint: Path
    langs: tuple[str, str]
    config: dict[str, Any]  # the config the checkpoint was trained with
    vocab: dict[str, int]
    memory_bytes: int = 0  # its weights and buffers as served (after quantizing)


def open_model(ckpt: Path, cfg: Config, opts: ServeOptions) -> Model:
    """The Translator of `ckpt` and what /v1/info and /languages tell about it."""
    translator = Translator.load(ckpt, cfg, opts)
    translator.warn = lambda message: None  # its lines are a batch's, not a request's: nmt.serve.native warns
    saved = translator.trained_config
    data = {"src_lang": cfg.data.src_lang, "tgt_lang": cfg.data.tgt_lang, **(saved.get("data") or {})}
    src, tgt = translator.langs or (data["src_lang"], data["tgt_lang"])
    vocab = dict(zip(("src", "tgt"), translator.vocab_sizes))
    tensors = [*translator.model.parameters(), *translator.model.buffers()]
    memory = sum(t.numel() * t.element_size() for t in tensors)
    return Model(translator, ckpt, (str(src), str(tgt)), saved, vocab, memory)


class Service:
    """The model side: loads the model on its own thread, then runs the batcher there until stopped."""

    def __init__(self, load: Callable[[], Model], limits: ServeConfig, threads: int = 0):
        self._load, self.limits, self._threads = load, limits, threads
        self.model: Model | None = None
        self.batcher: Batcher | None = None
        self.error: str | None = None
        self.on_failure: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._main, name="nmt-model", daemon=True)

    @property
    def translator(self) -> Translator:
        """The loaded model's translator (the endpoints reach it after `Models.ready()`)."""
        if self.model is None:
            raise RuntimeError("the model is not loaded")
        return self.model.translator

    def start(self) -> None:
        self._thread.start()

    def drain(self, within: float) -> None:
        """Shutdown begins: take no more work; queued requests that fit in `within` seconds are still translated,
        the others are answered 503 at once."""
        with self._lock:
            self._stopped = True
            batcher = self.batcher
        if batcher is not None:
            batcher.close(within)

    def stop(self) -> None:
        """Finish what is queued and end the model thread (a load still running is abandoned: daemon)."""
        self.drain(self.limits.shutdown_timeout)
        if self.batcher is not None:
            self._thread.join(self.limits.shutdown_timeout)

    @property
    def busy(self) -> bool:
        """The model thread still translates (after stop: a batch that outlasted the shutdown timeout)."""
        return self.batcher is not None and self._thread.is_alive()

    def _main(self) -> None:
        if self._threads > 0:
            torch.set_num_threads(self._threads)
        try:
            model = self._load()
        except Exception as e:  # the server cannot serve: say why and make it exit
            self.error = str(e) if isinstance(e, NmtError) else f"loading the model failed: {first_line(e)}"
            self.on_failure()
            return
        t = model.translator
        batcher = Batcher(self._translate, self._cost, max_cost=t.decode.max_tokens,
                          max_delay=self.limits.max_delay_ms / 1000, batching=self.limits.batching,
                          max_queue_seconds=self.limits.max_queue_seconds,
                          max_batch_seconds=self.limits.max_batch_seconds)
        self.model = model  # for _cost and _translate; the endpoints wait for the batcher below
        try:
            batcher.rate = self._warm_up(t)
        except Exception as e:  # the batches will fail and say why; the queue is bounded once one succeeds
            console.print(f"[yellow]warning:[/yellow] warming up failed: {first_line(e)}")
        with self._lock:
            if self._stopped:
                return
            self.batcher = batcher  # the endpoints take a model that is set as ready to take work
        console.print(f"ready: {'->'.join(model.langs)} on {t.device} in {t.precision} "
                      f"(~{batcher.rate or 0:,.0f} characters/s)")
        batcher.serve_forever()

    def _warm_up(self, t: Translator) -> float:
        """Translate made-up sentences (a quarter of the token budget) before taking requests: the first batches of
        a fresh process are slow, and the queue bound needs the model's throughput from the first request. Made of
        the vocabulary's words, so the estimate is pessimistic (the output may run long); batches under load
        raise it."""
        pieces = t.tokenizer.src_id_pieces(list(range(t.tokenizer.src_vocab_size)))
        words = [p[1:] for p in pieces if p.startswith("\u2581") and p[1:].isalpha()] or ["a"]
        lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(12)) for i in range(64)]
        rows = max(1, t.decode.max_tokens // 4 // (max(self._cost(line) for line in lines) or 1))
        lines = (lines * (rows // len(lines) + 1))[:rows]
        started = time.monotonic()
        t.translate_chunk(lines)
        return sum(len(line) + 1 for line in lines) / max(time.monotonic() - started, 1e-6)

    def _cost(self, text: str) -> int:
        """Source tokens (EOS included), as the decode token budget counts them."""
        assert self.model is not None
        return len(self.model.translator.tokenizer.encode_src([text])[0]) + 1

    def _translate(self, search: Search, lines: list[str]) -> list[Translation] | list[dict[str, Any]]:
        assert self.model is not None
        if search.explain is not None:  # POST /v1/explain (nmt.serve.explain)
            from nmt.explain.command import explain_sentence

            top_k, query = search.explain
            return [explain_sentence(self.model.translator, line, top_k=top_k, query=query, decode=search.decode)
                    for line in lines]
        # glossary lines' constrained searches stop at this deadline (nmt.translation.terminology): a batch stays short
        budget = WorkBudget.within("a batch", seconds=self.limits.max_batch_seconds + terminology.SEARCH_SECONDS)
        with bounded(budget):
            return self.model.translator.translate_chunk(lines, decode=search.decode, need_attention=search.attention,
                                                         glossary=search.glossary)
