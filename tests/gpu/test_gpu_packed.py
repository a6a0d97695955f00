"""On a CUDA GPU: packed batches (train.packed) through varlen FlashAttention give the padded batch's loss and
gradients (bf16 autocast: FlashAttention takes no fp32), a compiled forward and backward over packed batches of one
width builds its graphs once, and training updates on packed batches wait for nothing. Marked gpu, skipped without
a GPU; tests/data/test_packing.py proves the layout on the CPU in float64.

Dry run on the CPU (the same code, the dense-mask attention): NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest
tests/gpu/test_gpu_packed.py -m gpu -q"""

from __future__ import annotations

import os

import pytest
import torch

from nmt.data.batching import collate
from nmt.data.packing import collate_packed
from nmt.model import Transformer
from nmt.train.compiling import compiled_graphs
from nmt.train.update import piece_loss
from tests.helpers.batches import IDS, corpus
from tests.helpers.cuda import CUDA_AVAILABLE
from tests.helpers.modeling import PAD

DEVICE = torch.device(os.environ.get("NMT_GPU_TESTS_DEVICE") or "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.type == "cuda" and not CUDA_AVAILABLE, reason="needs a CUDA GPU")]


def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(24, 24, d_model=64, n_heads=4, d_ff=128, encoder_layers=2, decoder_layers=2, dropout=0.0,
                       pad_id=PAD, joint_vocab=True).to(DEVICE)


def loss_and_grads(m: Transformer, forward, batch) -> tuple[torch.Tensor, torch.Tensor]:
    m.zero_grad()
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        loss, _ = piece_loss(forward, m, batch.to(DEVICE), 0.1, PAD)
    loss.backward()
    return loss.detach().float(), torch.cat([p.grad.flatten() for p in m.parameters()])


def test_packed_through_varlen_attention_is_the_padded_batch():
    src, tgt = corpus(16, seed=5)
    m = model()
    padded = loss_and_grads(m, m, collate(src, tgt, **IDS))
    packed = loss_and_grads(m, m, collate_packed(src, tgt, range(16), **IDS, max_tokens=512))
    torch.testing.assert_close(packed[0], padded[0], rtol=2e-2, atol=0)  # bf16 products in both
    cosine = torch.nn.functional.cosine_similarity(packed[1], padded[1], dim=0)
    assert cosine > 0.999, float(cosine)


def test_a_compiled_forward_over_packed_batches_builds_its_graphs_once():
    m = model()
    forward = torch.compile(m)
    graphs = []
    for seed in range(4):  # other sentences, other counts and lengths, one width
        src, tgt = corpus(int(10 + 3 * seed), seed=seed)
        batch = collate_packed(src, tgt, range(len(src)), **IDS, max_tokens=640)
        assert batch.src.shape == (1, 641)
        loss, _ = loss_and_grads(m, forward, batch)
        assert torch.isfinite(loss)
        graphs.append(compiled_graphs())
    assert graphs[0] > 0 and graphs[-1] == graphs[1], graphs  # none after the second (its lengths become dynamic)
