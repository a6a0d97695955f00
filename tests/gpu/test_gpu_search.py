"""On a CUDA GPU: no search step waits for the device. torch.cuda.set_sync_debug_mode("error") makes every call that
synchronizes the host with the GPU (a value read by Python, a synchronous copy) an error; it is on during each step
of the search (nmt.search.loop.step: the decoder step, the masks, the strategy's choice) and each cache reorder, and
off for the polls between them (tests/helpers/waits.py). The outputs are the CPU's. Marked gpu, skipped without a GPU;
tests/search/test_host_waits.py runs the same on the CPU, where the waits are counted instead.

Dry run on the CPU (the same code, the waits counted): NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest
tests/gpu/test_gpu_search.py -m gpu -q"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from nmt import search
from nmt.search import SearchSettings
from tests.helpers.cuda import CUDA_AVAILABLE
from tests.helpers.tables import IDS, batch
from tests.helpers.waits import guard_search_steps

DEVICE = torch.device(os.environ.get("NMT_GPU_TESTS_DEVICE") or "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.type == "cuda" and not CUDA_AVAILABLE, reason="needs a CUDA GPU")]


@pytest.mark.parametrize("poll_every", [0, 3])  # 0: the device's default
@pytest.mark.parametrize("settings", [dict(beam=1), dict(beam=4, nbest=2, need_attention=True)], ids=["greedy", "beam"])
def test_no_search_step_waits_for_the_gpu(copy_model, monkeypatch, settings, poll_every):
    model, seqs = copy_model
    src = batch(seqs[:16])[0]
    want = search.run(model, src, SearchSettings(**settings), IDS)
    calls = guard_search_steps(monkeypatch, DEVICE)
    got = search.run(copy.deepcopy(model).to(DEVICE), src.to(DEVICE), SearchSettings(**settings, poll_every=poll_every),
                     IDS)
    assert calls["step"] > 4 and calls["reorder"] > 1
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]
    for g, w in zip(sum(got, []), sum(want, []), strict=True):
        assert g.logprob == pytest.approx(w.logprob, abs=1e-3)
        assert (g.attention is None) == (w.attention is None)
        if g.attention is not None:
            torch.testing.assert_close(g.attention, w.attention, atol=1e-3, rtol=0)
