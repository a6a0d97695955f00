"""Updates decided on the device and read one update late (nmt.train.update.queue_update, nmt.train.late): a
non-finite update moves nothing, not even Adam's step count or the learning-rate schedule; the device's schedule is
the host's; and a run trained so ends exactly where the run whose host decides each update ends, skipped updates,
validations, checkpoints and the metrics log included."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import nmt.train.loop as loop_mod
import nmt.train.update as update_mod
from nmt import checkpoint
from nmt.config.experiment import Config
from nmt.data.prefetch import epochs
from nmt.precision import Precision
from nmt.train.loop import Trainer, train
from nmt.train.optim import adam, learning_rate, learning_rate_on
from nmt.train.update import decides_on_device, finish_update, grad_scaler, queue_update
from tests.helpers.training import tiny_config
from tests.helpers.waits import no_host_wait


def model_with_grads(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    model(torch.randn(5, 4)).square().sum().backward()
    return model


def test_a_non_finite_update_moves_nothing_and_a_finite_one_moves_what_the_host_path_moves():
    model = model_with_grads()
    optimizer = adam(list(model.parameters()), lr=torch.tensor(0.1, dtype=torch.float64))
    assert decides_on_device(optimizer, grad_scaler(Precision("fp32"), torch.device("cpu")))
    before = [p.detach().clone() for p in model.parameters()]
    numbers = queue_update(model.parameters(), optimizer, 0.0, torch.tensor([float("inf"), 1.0]))
    assert numbers.tolist()[3] == 0.0 and numbers.dtype == torch.float64
    assert all(p.grad is None and torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    assert all(int(s["step"]) == 0 and not s["exp_avg"].any() for s in optimizer.state.values())

    device, host = model_with_grads(), model_with_grads()
    device_opt = adam(list(device.parameters()), lr=torch.tensor(0.1, dtype=torch.float64))
    host_opt = adam(list(host.parameters()), lr=0.1)
    numbers = queue_update(device.parameters(), device_opt, 1.0, torch.tensor([3.0, 2.0]))
    loss_sum, nll_sum, norm = finish_update(host.parameters(), host_opt, grad_scaler(Precision("fp32"),
                                                                                     torch.device("cpu")),
                                            1.0, torch.tensor([3.0, 2.0]))
    assert numbers.tolist() == [loss_sum, nll_sum, norm, 1.0]
    assert all(torch.equal(a, b) for a, b in zip(device.parameters(), host.parameters(), strict=True))


def test_without_the_fused_kernel_or_with_fp16_the_host_decides():
    model = model_with_grads()
    cpu = torch.device("cpu")
    assert not decides_on_device(torch.optim.Adam(model.parameters(), lr=0.1, foreach=True),
                                 grad_scaler(Precision("fp32"), cpu))
    fp16_scaler = torch.amp.GradScaler("cpu", enabled=True)
    assert not decides_on_device(adam(list(model.parameters()), lr=0.1), fp16_scaler)


@pytest.mark.parametrize("schedule, warmup", [("inverse_sqrt", 4000), ("inverse_sqrt", 0), ("noam", 4000)])
def test_the_devices_schedule_is_the_hosts(schedule, warmup):
    cfg = Config()
    cfg.train.schedule, cfg.train.warmup = schedule, warmup
    steps = [0, 1, 2, 100, 3999, 4000, 4001, 123_457]
    got = learning_rate_on(torch.tensor(steps, dtype=torch.float64), cfg).tolist()
    assert got == pytest.approx([learning_rate(s, cfg) for s in steps], rel=1e-15)


def records(run) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("time", "updates_per_s", "tgt_tokens_per_s")}
            for r in map(json.loads, (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines())]


def test_a_run_decided_on_the_device_ends_where_the_host_decided_run_ends(demo_data, tmp_path, monkeypatch):
    """Update 3's loss is made infinite in both runs: the same skip, the same schedule after it (the device's
    count of taken updates), the same validations, checkpoints, metrics and final weights, bit for bit."""
    real, calls = update_mod.projected_label_smoothed_loss, {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        value, nll = real(*args, **kwargs)
        return (value * float("inf"), nll) if calls["n"] == 3 else (value, nll)

    monkeypatch.setattr(update_mod, "projected_label_smoothed_loss", poisoned)
    settings = ("train.max_updates=7", "train.valid_every=3", "train.save_every=2", "train.valid_bleu_sentences=0",
                "model.dropout=0")
    calls["n"] = 0
    on_device = train(tiny_config(demo_data, tmp_path / "device", *settings), progress=False)
    calls["n"] = 0
    with monkeypatch.context() as m:
        m.setattr(loop_mod, "decides_on_device", lambda optimizer, scaler: False)
        on_host = train(tiny_config(demo_data, tmp_path / "host", *settings), progress=False)
    assert on_device["step"] == on_host["step"] == 7 and on_device["skipped_updates"] == on_host["skipped_updates"] == 1
    assert records(tmp_path / "device") == records(tmp_path / "host")
    assert [r["step"] for r in records(tmp_path / "host") if r["type"] == "valid"] == [3, 6]
    for name in ("last.pt", "checkpoint_6.pt", "averaged.pt"):
        a, b = (checkpoint.load(tmp_path / run / name)["model"] for run in ("device", "host"))
        assert all(torch.equal(a[k], b[k]) for k in a), name
    state = checkpoint.load(tmp_path / "device" / "last.pt")["train_state"]
    assert state["optimizer"]["state"][0]["step"] == 7  # the skipped update took no Adam step


def test_an_update_decided_on_the_device_asks_it_for_nothing(demo_data, tmp_path):
    """Counted on the CPU (tests/helpers/waits.py): no value read, no host copy, no data-dependent operator in three
    updates, the first included; the numbers of all three are then read at once. tests/gpu/test_gpu_update.py runs
    the same under CUDA's own check."""
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run", "train.update_freq=2"), progress=False)
    try:
        batches = epochs(trainer.train_data, trainer.sampler, trainer.special, 0)
        groups = [[next(batches).batch for _ in range(2)] for _ in range(3)]
        with no_host_wait(torch.device("cpu")):
            assert [trainer.update(group) for group in groups] == [None] * 3
        numbers = [values for _, values in trainer.late.read()]
    finally:
        trainer.close()
    assert [values[3] for values in numbers] == [1.0, 1.0, 1.0]
