"""The suite's own rules and the fixtures several test folders share: CUDA hidden from every test not marked gpu,
the `--long` mode, and the demo corpus, its trained model and a tiny copy-task model (each made once per session).
A folder's own fixtures are in its conftest.py; plain helpers (running the CLI, starting servers...) are in
tests/helpers/. The suite runs on the CPU even where a GPU is present, except the tests marked `gpu`
(tests/gpu/test_gpu.py): see "no CUDA unless marked gpu" below."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nmt import checkpoint
from nmt.config.experiment import load_config
from nmt.data.prepare import prepare
from nmt.demo.files import write_demo
from nmt.model import Transformer
from tests.helpers.cuda import hide_cuda, show_cuda
from tests.helpers.paths import DEMO_MODEL
from tests.helpers.report import print_worker_figures
from tests.helpers.tables import PAD, V, batch

torch.set_num_threads(1)  # tiny models gain nothing from threads; avoids OpenMP oversubscription


@pytest.fixture(autouse=True)
def one_thread_per_test():
    """Each test leaves its worker on one thread: an in-process `nmt train` or `nmt translate` sets torch's thread
    count for its process (train.threads, --threads), and a worker left on two threads beside a second busy worker
    runs every later test of its modules oversubscribed, a small model's update several times slower."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


# ---- no CUDA unless marked gpu
#
# The suite's facts are CPU facts (CPULinear layers, fp16 refused, `cuda:0` refused, a bit-exact resume, gloo
# ranks, the "auto" precision), but "auto" devices pick a GPU wherever there is one. So no test sees CUDA unless
# it is marked `gpu`: in this process torch.cuda.is_available() is False and torch.cuda.device_count() 0, and
# CUDA_VISIBLE_DEVICES="" hides the GPUs from the processes tests start (nmt_env children, torchrun, mp.spawn,
# servers). That holds from pytest_configure on, so session and module fixtures (demo_run, a module's
# Translator) and environments captured at import (tests.helpers.serving's ENV) see no GPU either; the autouse
# fixture `cuda_only_for_gpu_tests` gives a test marked gpu the real CUDA and environment back for its duration.
# tests.helpers.cuda reads the real answers first, at import (this module imports it before pytest_configure).
_session_cuda = pytest.MonkeyPatch()


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown (and never called) without it
def pytest_testnodedown(node, error) -> None:
    print_worker_figures(node)


@pytest.fixture(autouse=True)
def cuda_only_for_gpu_tests(request, monkeypatch):
    """A test marked gpu sees the machine's CUDA; every other test sees none (as the whole session does)."""
    if request.node.get_closest_marker("gpu") is not None:
        show_cuda(monkeypatch)
    else:
        hide_cuda(monkeypatch)  # already so since pytest_configure; again in case something changed it
    yield


@pytest.fixture(scope="session")
def demo_raw(tmp_path_factory) -> dict[str, str]:
    """Raw demo text files (train 2,000 / valid 100 / test 100 pairs)."""
    return write_demo(tmp_path_factory.mktemp("demo-raw"), n_train=2000, n_valid=100, n_test=100, seed=3)


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory, demo_raw) -> Path:
    """The demo corpus prepared into a data dir with a small joint BPE vocabulary."""
    out = tmp_path_factory.mktemp("demo-data") / "data"
    cfg = load_config(None, [f"data.dir={out}", "data.vocab_size=400"]).data
    cfg.train, cfg.valid, cfg.test = demo_raw["train"], demo_raw["valid"], demo_raw["test"]
    prepare(cfg, progress=False)
    return out


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """A run dir of the small demo model (the translate, attention, CLI and continued-training tests): the committed
    tests/fixtures/demo-model.pt, which is the averaged.pt of the recipe tests.helpers.training.train_demo_model
    trains on demo_data's corpus (400 updates; tests/fixtures/make_demo_model.py), saved again by this checkout's
    nmt as a run of it writes it (the current checkpoint format and every config key) as the run's averaged.pt and
    best.pt. Committed rather than trained here: the training took 25-50 s of every run of the suite on 2 cores."""
    run = tmp_path_factory.mktemp("demo-run") / "run"
    run.mkdir()
    model = checkpoint.load(DEMO_MODEL)
    model["config"] = model.config.to_dict()  # the keys added since format version 1, at their defaults
    for name in ("averaged.pt", "best.pt"):
        model.save(run / name)
    return run


@pytest.fixture(scope="session")
def copy_model() -> tuple[Transformer, list[list[int]]]:
    """A 2-layer model overfitted to copy 48 fixed sequences (a few seconds; the search and glossary tests)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 8, (48,), generator=g).tolist()
    seqs = [torch.randint(4, V, (n,), generator=g).tolist() for n in lengths]
    model = Transformer(V, V, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
                        pad_id=PAD, joint_vocab=True)
    src, tgt_in, labels = batch(seqs)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):
        loss = F.cross_entropy(model(src, tgt_in).view(-1, V), labels.view(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    return model.eval(), seqs


# ---- long mode: `pytest --long` or NMT_LONG_TESTS=1 (more fault-injection trials and hypothesis examples)


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="long fault-injection mode (same as NMT_LONG_TESTS=1); also runs tests marked slow")


def pytest_configure(config):
    import os

    if config.getoption("--long"):
        os.environ["NMT_LONG_TESTS"] = "1"  # read by test modules at import (hypothesis example counts)
    hide_cuda(_session_cuda)  # before collection imports the test modules: see "no CUDA unless marked gpu"


def pytest_unconfigure(config):
    _session_cuda.undo()


# The modules that take longest (pytest --durations=0: a minute or more of a worker each), collected first: pytest-xdist
# (`make test`: --dist loadscope) hands modules to its workers in collection order, and one of these started last
# would run alone at the end while the other worker idles.
FIRST = ("tests/search/test_compiled.py", "tests/interop/test_export_argos.py", "tests/train/test_faults.py",
         "tests/serve/test_serve.py", "tests/serve/test_serve_abuse.py", "tests/interop/test_marian.py",
         "tests/distill/test_int8_finetune.py", "tests/test_end_to_end.py")


def pytest_collection_modifyitems(config, items):
    import os

    rank = {module: i for i, module in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST)))  # stable: the rest in their order
    if os.environ.get("NMT_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="long mode only (--long or NMT_LONG_TESTS=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
