"""The compiled decoder step (nmt.search.compiled, `--compile`): the same hypotheses as nmt's own decoding for greedy
and beam search (a whole beam step compiled), n-best, min_len and length limits, with sentences padded up to a
package's bucket; a package compiled once is loaded by a later decoder, translator and `nmt translate` process
without compiling again; what it cannot serve runs eagerly or is refused with one line.

Three packages are compiled here (most of a minute each), on one thread each, and every search below fits them: the
encoder's, and for 8 rows the beam step of beam 2 and the decoder's step alone (greedy), without Inductor's GEMM
autotuning, which only changes which kernels a package calls (AUTOTUNE, NMT_COMPILE_AUTOTUNE=0)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt import search
from nmt.errors import NmtError
from nmt.search import SearchSettings, compiled
from nmt.search.compiled import CompiledDecoder, rows_bucket, threads_for
from nmt.search.package_store import package_dir, prune
from nmt.translation.translator import ModelOptions, Translator
from tests.helpers.hypotheses import (
    FOUR,
    LINES,
    PADDED_CASES,
    assert_same,
    assert_same_translations,
    compiled_and_eager,
)
from tests.helpers.paths import DEMO_MODEL, ROOT


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The demo model copied where its packages may be written (beside it), and its package for 8 rows compiled."""
    path = tmp_path_factory.mktemp("compiled") / "demo.pt"
    shutil.copy(DEMO_MODEL, path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled, "AUTOTUNE", False)
        translator = Translator.load(path, None, ModelOptions(threads=1, config_given=False, compile=True))
        for lines, beam in ((FOUR, 2), (FOUR * 2, 1)):  # 8 rows each
            translator.translate_chunk(lines, decode=translator.decode_with(beam=beam))
        yield path


@pytest.fixture()
def translator(checkpoint):
    said = []
    t = Translator.load(checkpoint, None, ModelOptions(threads=1, config_given=False, compile=True))
    t.compiled.announce = said.append
    t.said = said
    return t


@pytest.mark.parametrize("lines, decode", PADDED_CASES)
def test_the_compiled_step_finds_the_same_hypotheses(translator, lines, decode):
    got, want = compiled_and_eager(translator, lines, **decode)
    assert_same_translations(got, want)
    assert translator.said == []  # the packages compiled by the fixture served every search: nothing compiled
    step = "step" if decode["beam"] == 1 else f"beam{decode['beam']}-2.3.0"
    assert {kind for kind, _, _ in translator.compiled.runners} == {"encode", step}


def test_a_package_is_kept_beside_the_checkpoint_and_named_by_what_it_was_built_from(checkpoint, translator):
    packages = sorted(p.name for p in package_dir(checkpoint).glob("*.pt2"))
    assert {p.parent for p in package_dir(checkpoint).glob("*")} == {checkpoint.with_name("demo.pt.compiled")}
    assert [p.rsplit("-", 1)[0] for p in packages] == ["beam2-2.3.0-fp32-8rows-1t", "encode-fp32-1t",
                                                      "step-fp32-8rows-1t"]
    model = translator.compiled.model
    key = compiled.package_key(model, "step", 8, 1)
    assert packages[2] == f"step-fp32-8rows-1t-{key}.pt2"
    assert len({key, compiled.package_key(model, "step", 8, 2), compiled.package_key(model, "step", 16, 1)}) == 3
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert compiled.package_key(model, "step", 8, 1) != key  # other weights: another package


def test_prepare_loads_what_a_search_of_that_size_runs(translator):
    """CompiledDecoder.prepare (a bench's or a server's warm-up) takes the packages the fixture's searches built:
    3 and 4 sentences at beam 2 (8 rows), 5 to 8 greedy, nothing compiled."""
    for sentences, beam in ((3, 2), (4, 2), (5, 1), (8, 1)):
        translator.compiled.prepare(sentences, beam, translator.special, 1)
    assert set(translator.compiled.runners) == {("encode", 0, 1), ("beam2-2.3.0", 8, 1), ("step", 8, 1)}
    assert translator.said == []


def test_a_new_package_removes_its_stale_twins_and_nothing_else(tmp_path):
    """What `runner` does after a build: the packages of the same kind and shape built from other weights, code or
    torch go; other kinds, shapes and threads stay, and so does another build's temporary file."""
    def package(name: str) -> Path:
        (tmp_path / name).write_bytes(b"")
        return tmp_path / name

    new, old = package(f"step-8rows-1t-{'a' * 16}.pt2"), package(f"step-8rows-1t-{'b' * 16}.pt2")
    others = [package(f"step-8rows-2t-{'b' * 16}.pt2"), package(f"step-16rows-1t-{'b' * 16}.pt2"),
              package(f"beam2-2.3.0-8rows-1t-{'b' * 16}.pt2"), package(f"step-8rows-1t-{'c' * 16}x1y2z3.pt2")]
    assert prune(tmp_path, "step-8rows-1t", new) == [old]
    assert sorted(tmp_path.iterdir()) == sorted([new, *others])


def test_without_a_writable_directory_beside_it_a_checkpoint_gets_its_own_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(compiled.os, "access", lambda path, mode: False)
    a, b = package_dir(tmp_path / "a" / "model.pt"), package_dir(tmp_path / "b" / "model.pt")
    assert a.parent == b.parent == tmp_path / "cache" / "nmt" / "compiled" and a != b  # so prune spares b's


def test_a_later_process_loads_the_package_without_compiling(checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(FOUR) + "\n")
    cmd = [sys.executable, "-m", "nmt", "translate", "--checkpoint", str(checkpoint), "--threads", "1",
           "--beam", "2", "--input", str(source), "--no-progress"]
    env = {**os.environ, "NMT_COMPILE_AUTOTUNE": "0"}  # the package the fixture compiled
    fast = subprocess.run([*cmd, "--compile"], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    eager = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert fast.returncode == 0, fast.stderr
    assert "compiling" not in fast.stderr
    assert fast.stdout == eager.stdout and len(fast.stdout.splitlines()) == 4


def test_a_batch_of_more_rows_than_pay_runs_eagerly(translator, monkeypatch):
    monkeypatch.setattr(compiled, "MAX_ROWS", 16)
    lines = FOUR * 4  # 16 sentences of 2 beams: 32 rows, more than pay
    got, want = compiled_and_eager(translator, lines, beam=2)
    assert [t.text for t in got] == [t.text for t in want]
    assert translator.said == [] and translator.compiled.runners == {}


def test_a_search_that_needs_attention_runs_eagerly(translator):
    results = translator.translate_chunk(LINES, decode=translator.decode_with(beam=2), need_attention=True)
    assert all(r.hypotheses[0].attention is not None for r in results)
    with pytest.raises(ValueError, match="no attention"):
        translator.compiled.decode_step(torch.zeros(2, dtype=torch.long), None, need_attention=True)


@pytest.mark.parametrize("options, said", [
    (dict(dtype="bf16"), "--compile runs float32 \\(or --quantize int8\\) on a CPU"),
])
def test_what_cannot_be_compiled_is_refused_in_one_line(checkpoint, options, said):
    with pytest.raises(NmtError, match=said):
        try:
            Translator.load(checkpoint, None, ModelOptions(config_given=False, compile=True, **options))
        except NmtError as e:
            assert "\n" not in str(e)
            raise


def test_without_a_cxx_compiler_compile_is_refused_in_one_line(checkpoint, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(NmtError, match="--compile needs a C\\+\\+ compiler"):
        Translator.load(checkpoint, None, ModelOptions(config_given=False, compile=True))


def test_rows_go_to_the_next_power_of_two_and_small_steps_to_one_thread():
    assert [rows_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 100, 128)] == [1, 2, 4, 4, 8, 8, 16, 128, 128]
    assert [rows_bucket(n, 4) for n in (1, 2, 3, 32)] == [4, 8, 16, 128]
    small, big = 6 << 20, 105 << 20  # the tiny model's and the base model's step (bench/translate.py --configs)
    assert [threads_for(r, 2, small) for r in (8, 16, 32)] == [1, 1, 2] and threads_for(32, 1, small) == 1
    assert threads_for(4, 2, big) == 2 and threads_for(4, 1, big) == 1
    # a search runs compiled up to 128 rows (32 sentences of 4 beams)
    assert compiled.pays(32, 4) and not compiled.pays(33, 4) and compiled.pays(128, 1) and not compiled.pays(129, 1)


def test_a_step_reads_the_decoder_layers_and_the_output_projection_once(translator):
    model = translator.compiled.model
    layers = sum(p.numel() for p in model.decoder_layers.parameters())
    assert compiled.step_bytes(model) == 4 * (layers + sum(p.numel() for p in model.output.parameters()))
    assert model.output.weight is model.tgt_embed.weight  # tied: counted once, as the projection


def test_sources_of_other_lengths_decode_the_same_in_sentences_padded_to_a_bucket(translator):
    """The decoder outside a translator: a padded source batch of 3 sentences, padded to 4 of 2 beams."""
    decoder, special = translator.compiled, translator.special
    src = torch.tensor([[5, 6, 7, 8, special.eos], [9, 10, special.eos, special.pad, special.pad],
                        [11, 12, 13, special.eos, special.pad]])
    settings = SearchSettings(beam=2, nbest=2)
    with torch.inference_mode():
        assert_same(search.run(decoder, src, settings, special), search.run(translator.model, src, settings, special))
    assert isinstance(decoder, CompiledDecoder) and translator.said == []


def test_a_search_takes_a_package_built_for_other_threads_rather_than_stop_to_compile(checkpoint, tmp_path,
                                                                                      monkeypatch):
    """FreeCores changes a batch's thread count with the machine's load: a search whose packages exist for one
    thread only runs them when two are asked for (the same hypotheses) rather than stop a minute to compile; prepare (a
    bench's or a server's warm-up) builds the exact ones, which then replace the stand-ins."""
    directory = tmp_path / "packages"
    shutil.copytree(package_dir(checkpoint), directory)  # the fixture's packages, built for one thread
    translator = Translator.load(checkpoint, None, ModelOptions(threads=1, config_given=False, compile=True))
    said: list[str] = []
    translator.compiled = CompiledDecoder(translator.compiled.model, directory, said.append)
    monkeypatch.setattr(compiled, "threads_for", lambda rows, threads, weight_bytes: 2)
    got, want = compiled_and_eager(translator, FOUR, beam=2)
    assert_same([t.hypotheses for t in got], [t.hypotheses for t in want])
    assert said == [] and translator.compiled.stand_ins == {("encode", 0, 2), ("beam2-2.3.0", 8, 2)}

    built = []

    def build(module, inputs, threads, path, packed=()):  # the one-thread twin copied: no minute-long compile
        built.append(path.name.rsplit("-", 1)[0])
        shutil.copy(next(directory.glob(path.name.rsplit("-", 2)[0] + "-1t-*.pt2")), path)

    monkeypatch.setattr(compiled, "build", build)
    translator.compiled.prepare(4, 2, translator.special, 2)
    assert built == ["encode-fp32-2t", "beam2-2.3.0-fp32-8rows-2t"] and len(said) == 2
    assert translator.compiled.stand_ins == set()
    got, _ = compiled_and_eager(translator, FOUR, beam=2)
    assert_same([t.hypotheses for t in got], [t.hypotheses for t in want])
