"""The GPU training path's rules, checked on CPU with fakes of what only a GPU has: the GradScaler's skipped
steps, per-device RNG state, the batch reader running ahead, host syncs, TF32, per-rank devices, DDP
set-up, weights-only averaging. (tests/gpu/test_gpu.py runs the real thing where CUDA is.)"""

from __future__ import annotations

import threading
import time
import zipfile

import pytest
import torch
import torch.distributed as torch_dist

import nmt.train.loop as loop_mod
import nmt.train.update as update_mod
from nmt import checkpoint, kernels, precision
from nmt.data.batching import collate, split_batch
from nmt.data.prefetch import Prefetcher, epochs
from nmt.device import pick_device
from nmt.errors import CheckpointError, NmtError
from nmt.log import Reporter
from nmt.loss import chunk_rows, projected_label_smoothed_loss
from nmt.train import distributed
from nmt.train import state as trainstate
from nmt.train.loop import Trainer, train
from nmt.train.optim import learning_rate
from tests.helpers.training import tiny_config


def poison_loss(monkeypatch, bad_calls):
    """The training loss is infinite on the calls numbered in `bad_calls` (1-based)."""
    real, calls = update_mod.projected_label_smoothed_loss, {"n": 0}

    def loss(*args, **kwargs):
        calls["n"] += 1
        value, nll = real(*args, **kwargs)
        return (value * float("inf"), nll) if calls["n"] in bad_calls else (value, nll)

    monkeypatch.setattr(update_mod, "projected_label_smoothed_loss", loss)


def with_cpu_scaler(monkeypatch):
    """A GradScaler that is enabled on CPU, as fp16 training's is on a GPU."""
    real = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, **kw: real("cpu", **{**kw, "enabled": True}))


# ---------------------------------------------------------------- GradScaler accounting


def test_a_step_the_scaler_skips_is_not_counted(demo_data, tmp_path, monkeypatch):
    with_cpu_scaler(monkeypatch)
    poison_loss(monkeypatch, bad_calls={2})
    summary = train(tiny_config(demo_data, tmp_path / "run", "train.max_updates=4", "train.save_every=4"),
                    progress=False)
    assert summary["step"] == 4 and summary["skipped_updates"] == 1  # 5 attempts, 4 updates
    state = checkpoint.load(tmp_path / "run" / "last.pt")["train_state"]
    assert state["scaler"]["scale"] == 64.0  # 2**7 halved once by the overflow
    assert state["optimizer"]["state"][0]["step"] == 4  # Adam stepped exactly 4 times


def test_scaler_overflows_in_a_row_stop_the_run(demo_data, tmp_path, monkeypatch):
    with_cpu_scaler(monkeypatch)
    poison_loss(monkeypatch, bad_calls=set(range(1, 100)))
    with pytest.raises(NmtError, match="3 non-finite updates in a row"):
        train(tiny_config(demo_data, tmp_path / "run", "train.max_bad_updates=3"), progress=False)


def test_an_overflow_lowers_the_scale_and_leaves_the_weights(demo_data, tmp_path, monkeypatch):
    with_cpu_scaler(monkeypatch)
    poison_loss(monkeypatch, bad_calls={1})
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run"), progress=False)
    try:
        group = [next(epochs(trainer.train_data, trainer.sampler, trainer.special, 0)).batch]
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        with pytest.raises(trainstate.SkippedUpdate, match=r"loss scale 128 -> 64"):
            trainer.update(group)
        assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
        assert trainer.counters.step == 0 and trainer.update(group)["loss"] > 0  # the next one is taken
    finally:
        trainer.close()


# ---------------------------------------------------------------- RNG state per device


class FakeCudaRng:
    """torch.cuda's RNG state functions for a machine with `gpus` GPUs."""

    def __init__(self, monkeypatch, gpus: int):
        self.gpus, self.set = gpus, {}
        monkeypatch.setattr(torch.cuda, "get_rng_state", self.get)
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.put)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [self.get(i) for i in range(gpus)])

    def get(self, device=0):
        index = torch.device(device).index if not isinstance(device, int) else device
        assert index < self.gpus, f"no GPU {index}"
        return torch.full((4,), index, dtype=torch.uint8)

    def put(self, state, device=0):
        index = torch.device(device).index if not isinstance(device, int) else device
        assert index < self.gpus, f"no GPU {index}"
        self.set[index] = int(state[0])


def test_each_process_saves_only_its_own_gpu_rng(monkeypatch):
    FakeCudaRng(monkeypatch, gpus=2)
    state = trainstate.rng_state(torch.device("cuda", 1))
    assert torch.equal(state["cuda"], torch.full((4,), 1, dtype=torch.uint8))
    assert "cuda" not in trainstate.rng_state(torch.device("cpu"))


def test_a_checkpoint_with_two_gpu_states_resumes_where_one_is_visible(monkeypatch):
    """Older checkpoints saved get_rng_state_all(): restoring them with set_rng_state_all raised on a
    machine with fewer GPUs."""
    saved = {**trainstate.rng_state(torch.device("cpu")), "cuda": [torch.full((4,), i, dtype=torch.uint8)
                                                                    for i in (7, 9)]}
    fake = FakeCudaRng(monkeypatch, gpus=1)
    trainstate.set_rng_state(saved, torch.device("cuda", 0))
    assert fake.set == {0: 7}
    two = FakeCudaRng(monkeypatch, gpus=2)
    trainstate.set_rng_state({**saved, "cuda": saved["cuda"][:1]}, torch.device("cuda", 1))
    assert two.set == {}  # GPU 1's stream was not saved: it keeps its seed, nothing raises


# ---------------------------------------------------------------- batches read ahead


def test_prefetcher_keeps_the_order_and_pins_on_request(demo_data, tmp_path):
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run"), progress=False)
    try:
        ahead = [f.batch.index.tolist() for f in Prefetcher(epochs(trainer.train_data, trainer.sampler,
                                                                   trainer.special, max_epochs=2), pin=False)]
        trainer.sampler.load_state_dict({**trainer.sampler.state_dict(), "epoch": 1, "position": 0})
        direct = [f.batch.index.tolist() for f in epochs(trainer.train_data, trainer.sampler, trainer.special, 2)]
    finally:
        trainer.close()
    assert ahead == direct and len(direct) == 2 * len(trainer.sampler)


def test_prefetcher_raises_the_readers_error_and_stops_its_thread():
    def failing():
        yield from range(3)
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(Prefetcher(failing(), pin=False))

    def endless():
        i = 0
        while True:
            yield i
            i += 1

    prefetcher = Prefetcher(endless(), pin=False, depth=2)
    assert next(iter(prefetcher)) == 0
    prefetcher.close()
    assert not any(t.name == "nmt-prefetch" and t.is_alive() for t in threading.enumerate())


def test_a_checkpoint_records_the_batches_trained_on_not_those_read_ahead(demo_data, tmp_path):
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run"), progress=False)
    try:
        source = epochs(trainer.train_data, trainer.sampler, trainer.special, 0)
        with Prefetcher(source, pin=False, depth=4) as fetched:
            batches = trainer.consume(fetched)
            for _ in range(3):
                next(batches)
            deadline = time.monotonic() + 10
            while trainer.sampler.state_dict()["position"] <= 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert trainer.sampler.state_dict()["position"] > 3  # the reader is ahead
            saved = trainer.snapshot()["train_state"]["sampler"]
    finally:
        trainer.close()
    assert saved["position"] == 3 and saved["epoch"] == 1


def host_reads(monkeypatch) -> list[str]:
    """Every read of a tensor's value by the host (item, tolist, float, bool, int), which is a wait for a GPU."""
    reads = []
    for name in ("item", "tolist", "__float__", "__bool__", "__int__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda t, *a, _r=real, _n=name: reads.append(_n) or _r(t, *a))
    return reads


def test_an_update_decided_on_the_device_waits_for_nothing(demo_data, tmp_path, monkeypatch):
    """With fused Adam (and no fp16 loss scaler) an update's step is decided on the device and its numbers stay
    there: two updates read nothing; the host then reads both at once, one wait, while a next one would run."""
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run", "train.update_freq=3"), progress=False)
    try:
        batches = epochs(trainer.train_data, trainer.sampler, trainer.special, 0)
        groups = [[next(batches).batch for _ in range(3)] for _ in range(2)]
        reads = host_reads(monkeypatch)
        assert [trainer.update(group) for group in groups] == [None, None]
        assert reads == [] and len(trainer.late.queued) == 2
        numbers = [values for _, values in trainer.late.read()]
        monkeypatch.undo()
    finally:
        trainer.close()
    assert reads == ["tolist"]
    for loss, nll, norm, taken, *_ in numbers:
        assert loss > nll > 0 and norm > 0 and taken == 1.0
    lrs = [learning_rate(1, trainer.cfg), learning_rate(2, trainer.cfg)]
    assert [values[4] for values in numbers] == pytest.approx(lrs, rel=1e-15)
    assert [values[5] for values in numbers] == [float(sum(b.n_tgt_tokens for b in g)) for g in groups]


def test_where_the_host_decides_an_update_waits_for_the_device_once(demo_data, tmp_path, monkeypatch):
    """Without fused Adam or with fp16's loss scaler: one read per update, for the loss, NLL and norm together."""
    monkeypatch.setattr(loop_mod, "decides_on_device", lambda optimizer, scaler: False)
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run", "train.update_freq=3"), progress=False)
    try:
        batches = epochs(trainer.train_data, trainer.sampler, trainer.special, 0)
        group = [next(batches).batch for _ in range(3)]
        reads = host_reads(monkeypatch)
        stats = trainer.update(group)
        monkeypatch.undo()
    finally:
        trainer.close()
    assert reads == ["tolist"] and stats["loss"] > 0 and stats["gnorm"] > 0


def test_rank_0_averages_after_the_other_ranks_are_released(demo_data, tmp_path, monkeypatch):
    """Averaging reads several checkpoints: the other ranks must not wait for it inside a collective (NCCL's
    timeout); they pass the final barrier first."""
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run", "train.max_updates=4", "train.save_every=2"),
                      progress=False)
    order = []
    real_average = trainer.run_dir.average
    monkeypatch.setattr(trainer.dist, "barrier", lambda: order.append("barrier"))
    monkeypatch.setattr(trainer.run_dir, "average", lambda k: order.append("average") or real_average(k))
    try:
        trainer.run()
    finally:
        trainer.close()
    assert order == ["barrier", "average"]


# ---------------------------------------------------------------- the loss without host syncs


def test_batches_carry_their_target_positions_and_the_loss_uses_them():
    batch = collate([[5, 6], [7]], [[8, 9, 10], [11]], pad=0, bos=1, eos=2)
    assert batch.tgt_positions.tolist() == (batch.tgt_out.reshape(-1) != 0).nonzero().squeeze(1).tolist()
    assert len(batch.tgt_positions) == batch.n_tgt_tokens
    for piece in split_batch(batch, pad=0):
        assert piece.tgt_positions.tolist() == (piece.tgt_out.reshape(-1) != 0).nonzero().squeeze(1).tolist()
    torch.manual_seed(0)
    hidden, weight = torch.randn(*batch.tgt_out.shape, 8), torch.randn(20, 8)
    given = projected_label_smoothed_loss(hidden, weight, batch.tgt_out, 0.1, 0, positions=batch.tgt_positions)
    found = projected_label_smoothed_loss(hidden, weight, batch.tgt_out, 0.1, 0)
    assert all(torch.equal(a, b) for a, b in zip(given, found))


def test_the_loss_chunk_is_sized_per_device():
    assert chunk_rows(torch.device("cpu"), 32_000) == 32  # a CPU cache's worth of fp32 logits
    assert chunk_rows(torch.device("cuda", 0), 32_000) == 2097  # a 4,096-token batch in two chunks


def test_autocast_dtype_reads_the_device_types_autocast():
    assert kernels.autocast_dtype("cpu") is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert kernels.autocast_dtype("cpu") == torch.bfloat16 and kernels.autocast_dtype("cuda") is None


# ---------------------------------------------------------------- GPU settings


def test_gpu_training_computes_fp32_in_tf32_and_decoding_does_not(monkeypatch):
    class Model(torch.nn.Module):
        def to(self, *args, **kwargs):  # no GPU here: the move itself is not what is tested
            return self

    before = precision.tf32_enabled()
    try:  # restored by the API under test: monkeypatch cannot undo torch >= 2.9's computed allow_tf32
        precision.use_tf32(False)
        precision.prepare(Model(), torch.device("cuda", 0), precision.Precision("bf16"), training=True)
        assert precision.tf32_enabled()
        if precision._PER_BACKEND_TF32:  # the documented switches, not the legacy ones (mixing is an error)
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
            assert torch.backends.mkldnn.matmul.fp32_precision != "tf32"  # CPU products untouched
            assert torch.backends.cudnn.conv.fp32_precision == torch.backends.cudnn.rnn.fp32_precision  # untouched
        else:
            assert torch.backends.cuda.matmul.allow_tf32
        monkeypatch.setattr(precision.kernels, "swap_linears", lambda *a, **k: pytest.fail("CPU kernels on a GPU"))
        precision.prepare(Model(), torch.device("cuda", 0), precision.Precision("fp32"), training=False)
        assert not precision.tf32_enabled()  # fp32 decoding: fp32
        torch._C._get_cudnn_allow_tf32()  # torch.export's query of cuDNN's switches does not raise
    finally:
        precision.use_tf32(before)


def test_each_rank_takes_its_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("cuda", "train.device", local_rank=1, processes=2) == torch.device("cuda", 1)
    assert pick_device("cuda:1", "train.device") == torch.device("cuda", 1)  # one process: as asked
    with pytest.raises(NmtError, match=r"train.device=cuda:0 would put all 2 processes on one GPU"):
        pick_device("cuda:0", "train.device", local_rank=1, processes=2)


def test_nccl_group_is_joined_after_set_device_with_device_id(monkeypatch):
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    monkeypatch.setattr(torch_dist, "is_initialized", lambda: False)
    monkeypatch.setattr(torch_dist, "init_process_group", lambda backend, device_id=None: calls.append(
        ("init", backend, device_id)))
    gpu = torch.device("cuda", 1)
    group = distributed.init(gpu)
    assert calls == [("set_device", gpu), ("init", "nccl", gpu)] and (group.rank, group.world) == (1, 2)
    wrapped = {}
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", lambda m, **kw: wrapped.update(kw))
    group.wrap(torch.nn.Linear(2, 2))
    assert wrapped == {"device_ids": [1], "broadcast_buffers": False}  # the sinusoid table is a constant


def test_compile_option_trains_the_same_model(demo_data, tmp_path, monkeypatch):
    """train.compile: the model through torch.compile, each graph it builds logged; both runs' batches padded to
    lengths of a multiple of 8 (train.length_multiple), which changes nothing either computes."""
    compiled, real_compile, said = [], torch.compile, []

    def eager_compile(module, **kwargs):  # the wiring, without a C++ compiler: TorchDynamo's eager backend
        compiled.append(module)
        return real_compile(module, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    monkeypatch.setattr(Reporter, "info", lambda self, message: said.append(message))
    plain = train(tiny_config(demo_data, tmp_path / "a", "train.max_updates=3", "model.dropout=0",
                              "train.length_multiple=8"), progress=False)
    fast = train(tiny_config(demo_data, tmp_path / "b", "train.max_updates=3", "model.dropout=0",
                             "train.length_multiple=8", "train.compile=true"), progress=False)
    assert len(compiled) == 1 and fast["step"] == plain["step"] == 3
    a = checkpoint.load(tmp_path / "a" / "last.pt")["model"]
    b = checkpoint.load(tmp_path / "b" / "last.pt")["model"]
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)
    graphs = [m for m in said if m.startswith("torch.compile: graph")]
    assert graphs and "built at update 1" in graphs[0] and all("a multiple of 8" in m for m in graphs)
    assert len(graphs) <= 3  # lengths become dynamic after a second shape: no graph per batch


# ---------------------------------------------------------------- averaging reads the weights only


def flip_a_byte(path, member):
    """Corrupt one byte in the middle of a zip member's data (stored, uncompressed)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
        where = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
        f.seek(where)
        byte = f.read(1)
        f.seek(where)
        f.write(bytes([byte[0] ^ 0xFF]))


def records(path, load):
    """The zip members holding the weights' bytes, and the others' data members."""
    weights = load(path)["model"]
    sums = {checkpoint.storage_crc(weights[k]) for k in checkpoint.tensors_by_storage(weights)}
    with zipfile.ZipFile(path) as archive:
        data = [i for i in archive.infolist() if "/data/" in i.filename and i.file_size > 64]
    mine = [i.filename for i in data if (i.file_size, i.CRC) in sums]
    return mine, [i.filename for i in data if i.filename not in mine]


def test_averaging_reads_and_checks_only_the_weights(demo_data, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(demo_data, run, "train.max_updates=4", "train.save_every=2"), progress=False)
    paths = sorted(run.glob("checkpoint_*.pt"))
    weights_records, optimizer_records = records(paths[0], checkpoint.load)
    assert weights_records and optimizer_records
    flip_a_byte(paths[0], optimizer_records[0])
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        checkpoint.load(paths[0])  # a full load checks everything
    averaged = checkpoint.average(paths)  # the damaged Adam moments are never read
    expected = checkpoint.load(paths[1])["model"]
    assert averaged["model"].keys() == expected.keys()
    flip_a_byte(paths[0], weights_records[0])
    with pytest.raises(CheckpointError, match=r"checksum mismatch in the weight"):
        checkpoint.average(paths)
