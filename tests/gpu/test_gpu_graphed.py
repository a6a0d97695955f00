"""On a CUDA GPU: a search's steps as CUDA graphs (nmt.search.graphed, `nmt translate --compile` on a GPU) find the
hypotheses of the model's own steps (greedy and beam, n-best), a later search of the same shape replays the graphs
recorded by the first, and none of its steps waits for the device (torch.cuda.set_sync_debug_mode("error")).
Marked gpu, skipped without a GPU; tests/search/test_graphed.py runs the same decoder on the CPU with the graphs
stood in for. The golden outputs with --compile: tests/gpu/test_gpu_golden.py.

Dry run on the CPU (the graphs stood in for, the waits counted): NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest
tests/gpu/test_gpu_graphed.py -m gpu -q"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from nmt import search
from nmt.search import SearchSettings
from nmt.search.graphed import GraphedDecoder
from tests.helpers.cuda import CUDA_AVAILABLE
from tests.helpers.graphs import StandIn
from tests.helpers.tables import IDS, batch
from tests.helpers.waits import no_host_wait

DEVICE = torch.device(os.environ.get("NMT_GPU_TESTS_DEVICE") or "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.type == "cuda" and not CUDA_AVAILABLE, reason="needs a CUDA GPU")]


def graphed(model) -> GraphedDecoder:
    """The decoder on DEVICE: CUDA's graphs, or on the CPU the stand-ins."""
    model = copy.deepcopy(model).to(DEVICE)
    if DEVICE.type == "cuda":  # a step not recorded would run without a graph: here that fails the test
        return GraphedDecoder(model, announce=pytest.fail)
    stand_in = StandIn()
    return GraphedDecoder(model, stand_in.warm_up, stand_in.record, pytest.fail)


def guarded(monkeypatch, decoder: GraphedDecoder) -> dict[str, int]:
    """Each of the decoder's steps under no_host_wait; returns how many ran."""
    calls = {"steps": 0}
    for name in ("beam_step", "decode_step"):
        step = getattr(decoder, name)

        def call(*args, _step=step, **kwargs):
            calls["steps"] += 1
            with no_host_wait(DEVICE):
                return _step(*args, **kwargs)

        monkeypatch.setattr(decoder, name, call)
    return calls


@pytest.mark.parametrize("settings", [dict(beam=1), dict(beam=4, nbest=2)], ids=["greedy", "beam"])
def test_graphed_searches_find_the_models_hypotheses_and_replay_without_a_wait(copy_model, monkeypatch, settings):
    model, seqs = copy_model
    src = batch(seqs[:12])[0]
    want = search.run(model, src, SearchSettings(**settings), IDS)
    decoder = graphed(model)
    first = search.run(decoder, src.to(DEVICE), SearchSettings(**settings), IDS)  # records the graphs
    recorded = {id(g) for cache in decoder.local.caches.values() for g in cache.graphs.values()}
    calls = guarded(monkeypatch, decoder)
    again = search.run(decoder, src.flip(0).to(DEVICE), SearchSettings(**settings), IDS)[::-1]  # the same shape
    assert calls["steps"] > 4
    assert {id(g) for cache in decoder.local.caches.values() for g in cache.graphs.values()} == recorded
    for got in (first, again):
        assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]
        for g, w in zip(sum(got, []), sum(want, []), strict=True):
            assert g.logprob == pytest.approx(w.logprob, abs=1e-3)
