"""On a CUDA GPU: a training update waits for nothing. torch.cuda.set_sync_debug_mode("error") makes every call that
synchronizes the host with the GPU an error; it is on during three whole updates of `nmt train`'s Trainer (forward,
the chunked loss, backward, the gradient norm, the step that fused Adam skips or takes on the device, the learning
rate computed there: nmt.train.late), the first included, on padded and on packed batches (varlen attention), and
off when their numbers are read at once afterwards.
Marked gpu, skipped without a GPU; tests/train/test_late.py runs the same on the CPU, where the waits are counted.

Dry run on the CPU (the same code, the waits counted): NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest
tests/gpu/test_gpu_update.py -m gpu -q"""

from __future__ import annotations

import os

import pytest
import torch

from nmt.data.prefetch import epochs
from nmt.train.loop import Trainer
from tests.helpers.cuda import CUDA_AVAILABLE
from tests.helpers.training import tiny_config
from tests.helpers.waits import no_host_wait

DEVICE = torch.device(os.environ.get("NMT_GPU_TESTS_DEVICE") or "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.type == "cuda" and not CUDA_AVAILABLE, reason="needs a CUDA GPU")]


@pytest.mark.parametrize("amp,packed", [("none", False), ("bf16", False), ("bf16", True)])
def test_no_training_update_waits_for_the_gpu(demo_data, tmp_path, amp, packed):
    if amp == "bf16" and DEVICE.type == "cuda" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    cfg = tiny_config(demo_data, tmp_path / "run", f"train.device={DEVICE.type}", f"train.amp={amp}",
                      "train.update_freq=2", "train.clip_norm=1.0", f"train.packed={str(packed).lower()}")
    trainer = Trainer(cfg, progress=False)
    try:
        batches = epochs(trainer.train_data, trainer.sampler, trainer.special, 0)
        # pinned, as nmt train's reader (nmt.data.prefetch) hands them over: copied to the GPU without a wait
        groups = [[next(batches).batch.pin_memory() if DEVICE.type == "cuda" else next(batches).batch
                   for _ in range(2)] for _ in range(3)]
        with no_host_wait(DEVICE):
            assert [trainer.update(group) for group in groups] == [None] * 3
        numbers = [values for _, values in trainer.late.read()]
    finally:
        trainer.close()
    for loss, nll, norm, taken, lr, _ in numbers:
        assert loss > nll > 0 and norm > 0 and taken == 1.0 and lr > 0
