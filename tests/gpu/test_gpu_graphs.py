"""On a CUDA GPU: the model compiled in a CUDA graph mode (train.compile_mode=reduce-overhead) over packed batches
really replays CUDA graphs (none skipped), and an update of two micro-batches gets the eager model's gradients,
the second micro-batch added to the first, not written over it (nmt/train/compiling.py says why that needs a copy).
Marked gpu, skipped without a GPU; tests/train/test_compiling.py proves the copy on the CPU.

Dry run on the CPU (the same code, no CUDA graph): NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest
tests/gpu/test_gpu_graphs.py -m gpu -q"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from torch._dynamo.utils import counters

from nmt.data.packing import collate_packed
from nmt.model import Transformer
from nmt.train.compiling import compile_for_training
from nmt.train.update import piece_loss
from tests.helpers.batches import IDS, corpus
from tests.helpers.cuda import CUDA_AVAILABLE
from tests.helpers.modeling import PAD

DEVICE = torch.device(os.environ.get("NMT_GPU_TESTS_DEVICE") or "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.type == "cuda" and not CUDA_AVAILABLE, reason="needs a CUDA GPU")]


def gradients(m: Transformer, forward, pieces) -> torch.Tensor:
    """All gradients after the pieces' backward passes, one after another into the same `.grad`s."""
    m.zero_grad(set_to_none=True)
    for batch in pieces:
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            loss, _ = piece_loss(forward, m, batch, 0.1, PAD)
        loss.backward()
    return torch.cat([p.grad.flatten().float() for p in m.parameters()])


def test_two_micro_batches_under_cuda_graphs_sum_as_eager():
    torch.manual_seed(0)
    eager = Transformer(24, 24, d_model=64, n_heads=4, d_ff=128, encoder_layers=2, decoder_layers=2, dropout=0.0,
                        pad_id=PAD, joint_vocab=True).to(DEVICE)
    graphed = copy.deepcopy(eager)
    forward = compile_for_training(graphed, graphed.parameters(), "reduce-overhead")
    skips = counters["inductor"]["cudagraph_skips"]
    for update in range(3):  # the first records, the others replay
        pieces = []
        for seed in (2 * update, 2 * update + 1):
            src, tgt = corpus(12 + seed, seed=seed)
            pieces.append(collate_packed(src, tgt, range(len(src)), **IDS, max_tokens=640).to(DEVICE))
        expected, got = gradients(eager, eager, pieces), gradients(graphed, forward, pieces)
        cosine = torch.nn.functional.cosine_similarity(got, expected, dim=0)
        assert cosine > 0.999, (update, float(cosine))
        torch.testing.assert_close(got.norm(), expected.norm(), rtol=2e-2, atol=0)  # a sum, not one piece twice
    if DEVICE.type == "cuda":
        assert counters["inductor"]["cudagraph_skips"] == skips, "torch.compile ran without CUDA graphs"
