from __future__ import annotations

import json
import math
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

import nmt.log
import nmt.train.loop as train_mod
import nmt.train.update as update_mod
from nmt import checkpoint
from nmt.config.experiment import Config, load_config
from nmt.errors import NmtError
from nmt.loss import label_smoothed_loss
from nmt.rundir import RunDir, RunLock
from nmt.train.loop import train
from nmt.train.optim import adam, learning_rate
from tests.helpers.training import tiny_config


def metrics(run_dir, kind="train"):
    return [r for r in RunDir(run_dir).read_metrics() if r["type"] == kind]


def weights(path):
    return checkpoint.load(path)["model"]


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# ---------------------------------------------------------------- pure functions


def test_noam_schedule_matches_the_paper():
    cfg = load_config(None, ["train.schedule=noam", "train.lr=1.0", "train.warmup=4000", "model.d_model=512"])
    for step in (1, 100, 4000, 10000, 100000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert learning_rate(step, cfg) == pytest.approx(expected)
    assert learning_rate(4000, cfg) > learning_rate(3999, cfg) and learning_rate(4000, cfg) > learning_rate(4001, cfg)


def test_inverse_sqrt_schedule_warms_up_linearly_then_decays():
    cfg = load_config(None, ["train.lr=1e-3", "train.warmup=100", "train.warmup_init_lr=0"])
    assert learning_rate(50, cfg) == pytest.approx(5e-4)
    assert learning_rate(100, cfg) == pytest.approx(1e-3)
    assert learning_rate(400, cfg) == pytest.approx(5e-4)  # lr * sqrt(100/400)


def test_label_smoothing_against_hand_computation():
    logits = torch.tensor([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]]])
    target = torch.tensor([[2, 0]])  # the second position is padding (pad id 0)
    eps = 0.1
    p = torch.softmax(logits[0, 0], -1)
    nll = -math.log(p[2])
    smooth = -sum(math.log(x) for x in p) / 4
    loss, nll_sum = label_smoothed_loss(logits, target, eps, pad=0)
    assert nll_sum.item() == pytest.approx(nll, rel=1e-6)
    assert loss.item() == pytest.approx((1 - eps) * nll + eps * smooth, rel=1e-6)


def test_run_lock_refuses_a_second_trainer(tmp_path):
    lock = RunLock(tmp_path)
    with pytest.raises(NmtError, match="in use by another"):
        RunLock(tmp_path)
    lock.release()
    RunLock(tmp_path).release()


# ---------------------------------------------------------------- training runs


def test_training_writes_checkpoints_metrics_and_average(demo_data, tmp_path):
    run = tmp_path / "run"
    summary = train(tiny_config(demo_data, run, "train.save_every=3", "train.valid_every=3"), progress=False)
    assert summary["step"] == 6
    for name in ("config.yaml", "last.pt", "best.pt", "averaged.pt", "checkpoint_3.pt", "checkpoint_6.pt"):
        assert (run / name).is_file(), name
    losses = [r["loss"] for r in metrics(run)]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    valid = metrics(run, "valid")
    assert [v["step"] for v in valid] == [3, 6] and "bleu" in valid[0] and valid[1]["ppl"] > 1
    # averaged.pt is the mean of the last two step checkpoints
    a, b, avg = weights(run / "checkpoint_3.pt"), weights(run / "checkpoint_6.pt"), weights(run / "averaged.pt")
    for k in avg:
        if avg[k].is_floating_point():
            torch.testing.assert_close(avg[k], (a[k] + b[k]) / 2)
    state = checkpoint.load(run / "last.pt")
    assert state["train_state"]["step"] == 6 and "optimizer" in state["train_state"]
    assert state["tokenizer"] and state["vocab"]["src"] == 400


def test_resume_is_exact(demo_data, tmp_path):
    """Interrupted at update 5 (mid-epoch, dropout on) and resumed == one uninterrupted run."""
    common = ("train.max_tokens=4096", "model.dropout=0.1", "train.save_every=5")
    full = tmp_path / "full"
    train(tiny_config(demo_data, full, "train.max_updates=14", *common), progress=False)
    parts = tmp_path / "parts"
    train(tiny_config(demo_data, parts, "train.max_updates=5", *common), progress=False)
    (parts / "averaged.pt").unlink(missing_ok=True)
    summary = train(tiny_config(demo_data, parts, "train.max_updates=14", *common), progress=False)
    assert summary["epoch"] >= 2, "the run should cross an epoch boundary"
    assert_same_weights(weights(full / "last.pt"), weights(parts / "last.pt"))
    # metrics.jsonl holds each update once, as in the uninterrupted run
    assert [r["step"] for r in metrics(parts)] == list(range(1, 15))
    assert [r["loss"] for r in metrics(parts)] == [r["loss"] for r in metrics(full)]


class RecordingWriter:
    """Stands in for torch.utils.tensorboard.SummaryWriter (the tensorboard package is optional)."""

    made: list[RecordingWriter] = []

    def __init__(self, log_dir: str, purge_step: int | None = None):
        self.log_dir, self.purge_step, self.scalars, self.closed = log_dir, purge_step, [], False
        RecordingWriter.made.append(self)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, step, value))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_tensorboard_gets_the_metrics_and_a_resume_purges_redone_steps(demo_data, tmp_path, monkeypatch):
    monkeypatch.setattr(nmt.log, "_summary_writer", lambda: RecordingWriter)
    RecordingWriter.made.clear()
    run = tmp_path / "run"
    opts = ("train.tensorboard=true", "train.save_every=3", "train.valid_every=3")
    train(tiny_config(demo_data, run, "train.max_updates=3", *opts), progress=False)
    (run / "averaged.pt").unlink(missing_ok=True)
    train(tiny_config(demo_data, run, "train.max_updates=6", *opts), progress=False)
    first, second = RecordingWriter.made
    assert first.log_dir == str(run / "tensorboard") and first.closed and second.closed
    assert second.purge_step == 4  # resumed from update 3: TensorBoard drops anything logged after it
    losses = {step: value for tag, step, value in first.scalars + second.scalars if tag == "train/loss"}
    assert losses == {r["step"]: r["loss"] for r in metrics(run)}
    assert [step for tag, step, _ in first.scalars + second.scalars if tag == "valid/bleu"] == [3, 6]


def test_tensorboard_without_the_package_is_a_clear_error(demo_data, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(NmtError, match="pip install tensorboard"):
        train(tiny_config(demo_data, tmp_path / "run", "train.tensorboard=true"), progress=False)


def test_adam_is_fused_where_torch_supports_it_and_plain_elsewhere(monkeypatch):
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert adam(params, lr=1e-3).defaults["fused"]  # torch >= 2.4 has the fused kernel on CPU
    real = torch.optim.Adam

    def old_torch_adam(params, fused=None, **kwargs):  # torch 2.2/2.3: fused is CUDA-only
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                               "devices: ['cuda']")
        return real(params, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", old_torch_adam)
    assert not adam(params, lr=1e-3).defaults.get("fused")


def test_bf16_autocast_training_step_on_cpu(demo_data, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(demo_data, run, "train.amp=bf16", "train.max_updates=3"), progress=False)
    losses = [r["loss"] for r in metrics(run)]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)


def test_fp16_needs_cuda(demo_data, tmp_path):
    with pytest.raises(NmtError, match="fp16 needs a CUDA"):
        train(tiny_config(demo_data, tmp_path / "run", "train.amp=fp16"), progress=False)


def test_non_finite_updates_are_skipped_then_abort(demo_data, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(tiny_config(demo_data, run, "train.max_updates=4", "train.save_every=4"), progress=False)
    before = (run / "last.pt").read_bytes()
    real = update_mod.projected_label_smoothed_loss
    calls = {"n": 0}

    def one_nan(hidden, weight, target, eps, pad=0, bias=None, **kwargs):
        calls["n"] += 1
        loss, nll = real(hidden, weight, target, eps, pad, bias, **kwargs)
        return (loss * float("nan"), nll) if calls["n"] == 2 else (loss, nll)

    monkeypatch.setattr(update_mod, "projected_label_smoothed_loss", one_nan)
    summary = train(tiny_config(demo_data, run, "train.max_updates=7", "train.save_every=100"), progress=False)
    assert summary["step"] == 7 and summary["skipped_updates"] == 1
    assert all(math.isfinite(v) for v in weights(run / "last.pt")["src_embed.weight"].flatten().tolist())

    def all_nan(*args, **kwargs):
        return tuple(x * float("nan") for x in real(*args, **kwargs))

    monkeypatch.setattr(update_mod, "projected_label_smoothed_loss", all_nan)
    before = (run / "last.pt").read_bytes()
    with pytest.raises(NmtError, match="3 non-finite updates in a row"):
        train(tiny_config(demo_data, run, "train.max_updates=20", "train.max_bad_updates=3"), progress=False)
    assert (run / "last.pt").read_bytes() == before  # the last good checkpoint is untouched


def test_run_dir_of_another_experiment_is_refused_unless_forced(demo_data, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(demo_data, run, "train.max_updates=2"), progress=False)
    other = tiny_config(demo_data, run, "model.d_model=64", "train.max_updates=2")
    with pytest.raises(NmtError, match=r"holds another experiment \(model.d_model: 32 vs 64\).*--force"):
        train(other, progress=False)
    summary = train(other, force=True, progress=False)
    assert summary["step"] == 2 and checkpoint.load(run / "last.pt")["config"]["model"]["d_model"] == 64


def test_missing_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(NmtError, match="run `nmt prepare` first"):
        train(tiny_config(tmp_path / "nope", tmp_path / "run"), progress=False)


def test_vocabulary_mismatch_on_resume(demo_data, demo_raw, tmp_path):
    from nmt.data.prepare import prepare

    run = tmp_path / "run"
    train(tiny_config(demo_data, run, "train.max_updates=2"), progress=False)
    other = tmp_path / "other-data"
    cfg = load_config(None, [f"data.dir={other}", "data.vocab_size=300"]).data
    cfg.train, cfg.valid = demo_raw["train"], demo_raw["valid"]
    prepare(cfg, progress=False)
    bad = tiny_config(other, run, "train.max_updates=4")
    bad.data.vocab_size = 400  # same experiment key, but the data dir has another vocabulary
    with pytest.raises(NmtError, match="vocabularies 400/400 but .* has 300/300"):
        train(bad, progress=False)


def test_time_budget_is_honoured_including_final_work(demo_data, tmp_path):
    run = tmp_path / "run"
    budget_min = 0.1
    summary = train(tiny_config(demo_data, run, f"train.max_minutes={budget_min}", "train.max_updates=100000",
                                "train.save_every=3"), progress=False)
    assert summary["stopped"] == "max_minutes"
    assert summary["elapsed"] <= budget_min * 60
    assert summary["step"] > 5
    assert (run / "averaged.pt").is_file()
    assert checkpoint.load(run / "last.pt")["train_state"]["step"] == summary["step"]


# ---------------------------------------------------------------- DDP (gloo, 2 processes)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, cfg_dict: dict) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from nmt.config.experiment import config_from_dict

    train(config_from_dict(cfg_dict), progress=False)


def test_ddp_with_gloo_matches_single_process(demo_data, tmp_path):
    """2 processes x update_freq 1 == 1 process x update_freq 2 (same global batches)."""
    common = ("model.dropout=0", "train.max_updates=4", "train.save_every=4")
    single = tmp_path / "single"
    train(tiny_config(demo_data, single, "train.update_freq=2", *common), progress=False)
    ddp = tmp_path / "ddp"
    cfg: Config = tiny_config(demo_data, ddp, "train.update_freq=1", *common)
    mp.spawn(_ddp_worker, args=(2, _free_port(), cfg.to_dict()), nprocs=2, join=True)
    single_losses = [r["loss"] for r in metrics(single)]
    ddp_losses = [r["loss"] for r in metrics(ddp)]
    assert len(ddp_losses) == 4
    assert ddp_losses == pytest.approx(single_losses, rel=1e-4)
    a, b = weights(single / "last.pt"), weights(ddp / "last.pt")
    # Adam divides by sqrt(v): coordinates whose gradient is ~0 turn float noise into lr-sized steps,
    # so compare element-wise loosely (lr = 3e-4..1.2e-3 here) and the whole model tightly.
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=5e-3)
    diff = sum((a[k].double() - b[k].double()).norm() ** 2 for k in a) ** 0.5
    total = sum(a[k].double().norm() ** 2 for k in a) ** 0.5
    assert diff / total < 1e-3
    assert json.loads((ddp / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1  # rank 0 only


# ---------------------------------------------------------------- issue 12: defects found by reading and use


def test_best_checkpoint_falls_back_to_loss_with_lower_is_better(demo_data, tmp_path):
    """best_metric bleu without BLEU (valid_bleu_sentences 0): best.pt must be the lowest validation loss."""
    run = tmp_path / "run"
    summary = train(tiny_config(demo_data, run, "train.valid_every=1", "train.valid_bleu_sentences=0",
                                "train.max_updates=5", "train.lr=1e-2", "train.save_every=1",
                                "train.keep_last=5"), progress=False)
    losses = [v["loss"] for v in metrics(run, "valid")]
    assert len(losses) == 5 and losses[-1] < losses[0]  # learning: the first validation is not the best
    assert summary["best"] == min(losses)
    best_step = 1 + losses.index(min(losses))
    assert_same_weights(weights(run / "best.pt"), weights(run / f"checkpoint_{best_step}.pt"))


def test_separate_vocabularies_of_equal_size_are_not_tied(demo_raw, tmp_path):
    from nmt.data.prepare import prepare

    cfg = load_config(None, [f"data.dir={tmp_path / 'data'}", "data.vocab_size=300", "data.joint_vocab=false"]).data
    cfg.train, cfg.valid = demo_raw["train"], demo_raw["valid"]
    meta = prepare(cfg, progress=False)
    assert meta["src_vocab_size"] == meta["tgt_vocab_size"] == 300  # equal sizes, two vocabularies
    run = tmp_path / "run"
    train(tiny_config(tmp_path / "data", run, "train.max_updates=1"), progress=False)
    model = weights(run / "last.pt")
    assert not torch.equal(model["src_embed.weight"], model["tgt_embed.weight"])


def test_resume_on_a_data_dir_prepared_again_is_refused_unless_asked(demo_data, tmp_path):
    from nmt.data.prepare import prepare
    from nmt.demo.files import write_demo

    run, data = tmp_path / "run", tmp_path / "data"
    cfg = load_config(None, [f"data.dir={data}", "data.vocab_size=400"]).data
    first = write_demo(tmp_path / "raw1", n_train=2000, n_valid=50, n_test=10, seed=3)
    cfg.train, cfg.valid = first["train"], first["valid"]
    prepare(cfg, progress=False)
    train(tiny_config(data, run, "train.max_updates=2"), progress=False)
    second = write_demo(tmp_path / "raw2", n_train=2000, n_valid=50, n_test=10, seed=4)  # same languages and sizes
    cfg.train, cfg.valid = second["train"], second["valid"]
    prepare(cfg, force=True, progress=False)
    with pytest.raises(NmtError, match=r"trained on other data: .* was prepared again .*resume_on_new_data=true"):
        train(tiny_config(data, run, "train.max_updates=4"), progress=False)
    summary = train(tiny_config(data, run, "train.max_updates=4", "train.resume_on_new_data=true"), progress=False)
    assert summary["step"] == 4 and [r["step"] for r in metrics(run)] == [1, 2, 3, 4]


def test_resume_with_another_number_of_processes(demo_data, tmp_path):
    """A checkpoint of a 2-process run resumed by 3 processes (here: rank 2 of 3) restores the weights and
    counters and seeds a new RNG stream instead of failing on the missing rank."""
    from nmt.train import state as trainstate
    from nmt.train.loop import Trainer

    run = tmp_path / "run"
    train(tiny_config(demo_data, run, "train.max_updates=2"), progress=False)
    state = checkpoint.load(run / "last.pt")
    state["_path"] = str(run / "last.pt")
    state["train_state"]["rng"] = [state["train_state"]["rng"]] * 2  # as saved by two ranks
    trainer = Trainer(tiny_config(demo_data, tmp_path / "other", "train.max_updates=4"), progress=False)
    try:
        counters = trainstate.restore(state, trainer.model, trainer.optimizer, trainer.scaler, trainer.sampler,
                                      rank=2, world=3, seed=1)
    finally:
        trainer.close()
    assert counters.step == 2 and state.processes == 2
    assert_same_weights(trainer.model.state_dict(), state["model"])
    again = torch.rand(3)
    trainstate.restore(state, trainer.model, trainer.optimizer, trainer.scaler, trainer.sampler, rank=2, world=3,
                       seed=1)
    assert torch.equal(torch.rand(3), again)  # the new stream is deterministic


def test_keep_last_below_average_last_keeps_enough_and_says_so(demo_data, tmp_path, capsys):
    run = tmp_path / "run"
    train(tiny_config(demo_data, run, "train.keep_last=1", "train.average_last=3", "train.save_every=1",
                      "train.max_updates=5"), progress=False)
    assert [s for s, _ in RunDir(run).step_checkpoints()] == [3, 4, 5]
    assert "train.keep_last=1 but train.average_last=3: keeping the last 3 checkpoints" in capsys.readouterr().err


def test_continue_an_nmt_model_on_new_data(demo_run, demo_raw, tmp_path):
    """--tokenizer-from / --init-from with nmt's own checkpoint: new data encoded with the model's SentencePiece
    model, training starts from its weights (its loss, not a fresh model's) with a fresh schedule."""
    from nmt.data.prepare import prepare

    ckpt = demo_run / "averaged.pt"
    cfg = load_config(None, [f"data.dir={tmp_path / 'data'}", f"data.tokenizer_from={ckpt}"]).data
    cfg.train, cfg.valid = demo_raw["valid"], demo_raw["test"]  # "new" data: sentences it was not trained on
    meta = prepare(cfg, progress=False)
    assert meta["tokenizer_from"] == str(ckpt) and meta["spm_type"] is None
    run = tmp_path / "run"
    common = [f"data.dir={tmp_path / 'data'}", f"train.run_dir={run}", "train.max_tokens=1024", "train.warmup=5",
              "train.lr=1e-3", "train.log_every=1", "train.valid_bleu_sentences=0", "train.max_updates=3"]
    train(load_config(None, [*common, f"train.init_from={ckpt}"]), progress=False)
    train(load_config(None, [*common, f"train.run_dir={tmp_path / 'scratch'}", "model.d_model=64",
                             "model.n_heads=4", "model.d_ff=128", "model.encoder_layers=2", "model.decoder_layers=2",
                             "model.max_positions=256"]), progress=False)
    continued, scratch = metrics(run)[0]["loss"], metrics(tmp_path / "scratch")[0]["loss"]
    assert continued < scratch - 1.0
    assert checkpoint.load(run / "last.pt")["config"]["model"] == checkpoint.load(ckpt)["config"]["model"]


def test_training_on_cpu_computes_linear_layers_with_fast_linear(demo_data, tmp_path):
    """nmt train on CPU: every Linear layer through nmt.kernels.fast_linear (oneDNN in float32 where faster), and the
    checkpoint it writes still holds the plain parameter names a model loads."""
    from nmt.kernels import CPULinear

    trainer = train_mod.Trainer(tiny_config(demo_data, tmp_path / "run", "train.max_updates=2"), progress=False)
    try:
        assert trainer.device.type == "cpu"
        assert not any(type(m) is torch.nn.Linear for m in trainer.model.modules())
        assert any(isinstance(m, CPULinear) for m in trainer.model.modules())
        trainer.run()
    finally:
        trainer.close()
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    plain = train_mod.Transformer.from_config(trainer.cfg.model, *trainer.data.vocab_sizes, pad_id=trainer.special.pad,
                                              joint_vocab=trainer.tokenizer.joint)
    plain.load_state_dict(state["model"])  # strict: the same names
