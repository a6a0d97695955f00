"""A compiled search step (`nmt translate --compile`, `nmt serve --compile`): for beam search the whole step (the
static-shape decoder step of nmt.search.static, step_logits, nmt.search.beam's beam_rule, the cache's reorder), for
greedy search the decoder's step, and the encoder with the decoder's cross-attention keys/values, compiled ahead of
time by AOTInductor into packages that are saved on disk, so the compile is paid once per model, row bucket, thread
count and machine, and a later start only loads them (milliseconds). Only searches of up to MAX_ROWS rows run
compiled (`pays`).

Why compile: at a few rows a step is hundreds of small operators, each paying PyTorch's dispatch and a library call,
and torch's float32 matrix multiply (MKL's sgemm) runs small-M products slowly on some CPUs (AMD EPYC). Inductor with
`max_autotune` writes C++ micro-kernels for the exact matrix shapes (its CPP GEMM template), fuses the rest, and
AOTInductor calls it all from C++ with no Python in between. `python bench/translate.py --compile` measures it.

Shapes: a package serves one row count, since the GEMM template specialises on the matrices' M. A batch of N rows runs
in the package of the next power of two, its extra rows padded (token 0 against a one-position source) and dropped.
The source length and the positions a step reads (StaticCache.prefix) are dynamic: one package serves every step of
every batch of its rows, the encoder's any batch and source length. The kernels' thread count is fixed when they are
compiled, so it is part of a package's key too.

A package is named by what it was built from (the weights, the model's and this module's code, torch, the CPU's
instruction set, rows, threads): a changed checkpoint or a new torch builds a new one, which removes the one it
replaces from the checkpoint's directory (prune). Float32 on a CPU only, its Linear layers plain or with int8
weights (`--compile --quantize int8`, nmt.int8.to_int8_weights): fbgemm's product where the CPU has VNNI, the one
eager `--quantize int8` computes, which the package calls back (its packed weights are the package's inputs), else
aten's int8-weight product, which Inductor compiles."""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from nmt.int8 import FbgemmInt8Linear, Int8WeightLinear, fbgemm_layers, packed_as_inputs
from nmt.search.package_store import load, prune
from nmt.search.padded import PaddedCache, PaddedDecoder, Program, StepRunner, rows_bucket, step_program
from nmt.search.static import cross_keys_values

# Inductor's GEMM autotuning: its C++ micro-kernels where they beat ATen's, what makes the step fast; the environment's
# NMT_COMPILE_AUTOTUNE=0 compiles in about half the time a package that runs slower
AUTOTUNE = os.environ.get("NMT_COMPILE_AUTOTUNE", "1") != "0"
# a step of up to SMALL_ROWS rows over up to SMALL_BYTES of weights runs on one thread, a second one waiting more than
# it helps; bigger weights are read from memory, and two cores read them faster (bench/translate.py --compile: the
# base model's 105 MB step at 4 rows in 22 ms on one thread, 13 ms on two; the tiny model's 6 MB faster on one)
SMALL_ROWS = 16
SMALL_BYTES = 16 << 20
# the most rows a search runs compiled: 32 sentences at beam 4 (a whole search at 128 rows, compiled over eager time,
# 2 threads: the tiny model 0.90, the base model 0.93 in float32 and 0.98 in int8; docs/benchmarks.md)
MAX_ROWS = 128


def pays(sentences: int, per: int) -> bool:
    """Whether a search of `sentences` sentences of `per` rows each (its beam) runs compiled (MAX_ROWS)."""
    return rows_bucket(sentences, per) <= MAX_ROWS


def threads_for(rows: int, threads: int, weight_bytes: int) -> int:
    """The thread count a step of `rows` rows over `weight_bytes` of weights (step_bytes) runs, and is compiled,
    with, `threads` being the batch's."""
    return 1 if rows <= SMALL_ROWS and weight_bytes <= SMALL_BYTES else max(1, threads)


def step_bytes(model: nn.Module) -> int:
    """The bytes of weights a decoder step reads: its layers' and the output projection's (parameters, or buffers
    where they are int8: nmt.int8's layers)."""
    weights = [t for m in (model.decoder_layers, model.output) for t in (*m.parameters(), *m.buffers())]
    return sum(w.numel() * w.element_size() for w in {id(w): w for w in weights}.values())


class _Encode(Program):
    """The encoder and every decoder layer's cross-attention keys/values of its output, for any batch and source
    length: src [B, S] -> cross_kv [L, 2, B, H, S, Dh], src_pad_mask [B, S] (True: padding)."""

    def forward(self, src: Tensor, *packed: Tensor) -> tuple[Tensor, Tensor]:
        with packed_as_inputs(packed):
            memory, src_pad_mask = self.model.encode(src)
            return cross_keys_values(self.model, memory), src_pad_mask


def package_key(model: nn.Module, kind: str, rows: int, threads: int) -> str:
    """What a package is built from, hashed: its weights, the code of the model's modules (nmt.model's, nmt.kernels'
    Int8WeightLinear, torch's), of the step and of the search, its kind (the step, or a beam step with its beam and
    special ids), torch's version, the CPU's instruction set, rows, threads and AUTOTUNE."""
    h = hashlib.sha256()
    modules = sorted({sys.modules[type(m).__module__].__file__ for m in model.modules()})  # nmt.model, nmt.kernels
    for path in (*map(Path, modules), *sorted(Path(__file__).parent.glob("*.py"))):
        h.update(path.read_bytes())
    cpu = torch.backends.cpu.get_cpu_capability()
    h.update(f"{torch.__version__}|{cpu}|{kind}|{rows}|{threads}|{AUTOTUNE}".encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def example_inputs(model: nn.Module, rows: int, K: int | None) -> tuple[Tensor, ...]:
    """Inputs of a step of `rows` rows (and of a beam step of K beams, rows // K sentences): a 7-token source, a
    9-position cache (different sizes, so that export keeps the two dimensions apart)."""
    layers, attn = model.decoder_layers, model.decoder_layers[0].self_attn
    L, H, Dh, N = len(layers), attn.n_heads, attn.d_head, rows // (K or 1)
    step = (torch.zeros(rows, dtype=torch.long), torch.zeros((), dtype=torch.long),
            torch.zeros(9, L, 2, rows, H, Dh), torch.zeros(L, 2, N, H, 7, Dh), torch.ones(N, 1, 1, 7, dtype=torch.bool))
    if K is None:
        return step
    return (*step, torch.zeros(9, rows, dtype=torch.long), torch.zeros(rows),
            torch.full((N, K), float("-inf"), dtype=torch.float64),
            torch.full((N,), 5), torch.full((rows,), 5), torch.zeros((), dtype=torch.long),
            torch.ones((), dtype=torch.float64), torch.zeros((), dtype=torch.long))


def free_dims(module: nn.Module, inputs: tuple[Tensor, ...]) -> tuple[dict[int, Any] | None, ...]:
    """The dimensions of a package's inputs left free: a step's source length S and cache capacity T (in the
    inputs of example_inputs), the encoder's batch and source length."""
    positions = module.model.max_positions
    S = torch.export.Dim("S", min=1, max=positions)
    if isinstance(module, _Encode):
        return ({0: torch.export.Dim("B", min=1, max=1 << 16), 1: S},)
    T = torch.export.Dim("T", min=2, max=positions + 1)
    return (None, None, {0: T}, {4: S}, {3: S}, *([{0: T}] if len(inputs) > 5 else []), *[None] * (len(inputs) - 6))


def build(module: Program, inputs: tuple[Tensor, ...], threads: int, path: Path,
          packed: Sequence[Tensor] = ()) -> None:
    """Compile `module` (a StepProgram, BeamStepProgram or _Encode) for these inputs' shapes, the free_dims left
    free, and the packed weights of its model's int8 layers (`packed`, the order of nmt.int8.fbgemm_layers), on
    `threads` threads, into the package `path` (written whole, then renamed: a killed compile leaves no half
    package)."""
    shapes = free_dims(module, inputs)
    if packed:  # export takes forward's *packed as one argument, of fixed shapes
        shapes = (*shapes, (None,) * len(packed))
    inputs = (*inputs, *packed)
    wanted = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            program = torch.export.export(module.eval(), inputs, dynamic_shapes=shapes)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".pt2", dir=path.parent)
            os.close(fd)
            try:
                tuned = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"} if AUTOTUNE else {}
                inductor = importlib.import_module("torch._inductor")  # here only: it takes seconds to import
                inductor.aoti_compile_and_package(program, package_path=tmp,
                                                  inductor_configs={"freezing": True, **tuned})
                os.replace(tmp, path)
            finally:
                Path(tmp).unlink(missing_ok=True)
    finally:
        torch.set_num_threads(wanted)


class CompiledDecoder(PaddedDecoder):
    """`model` (float32 on the CPU, plain or Int8WeightLinear layers) as nmt.search.loop.run uses a model,
    through compiled packages: `encode` the encoder (with every layer's cross-attention keys/values), `beam_step` a
    whole beam search step, `decode_step` the decoder's step alone (greedy search). Packages are looked for, and
    saved, in `directory`; `announce(message)` is told before a compile (about a minute each on two cores)."""

    def __init__(self, model: nn.Module, directory: Path, announce: Callable[[str], None] = lambda _: None):
        super().__init__(model)
        self.directory, self.announce = Path(directory), announce
        self.runners: dict[tuple[str, int, int], Callable[..., Any]] = {}
        self.stand_ins: set[tuple[str, int, int]] = set()  # runners of a package built for other threads
        self.step_bytes = step_bytes(model)
        # in a package's name: the float32 and the int8 weights of one checkpoint are packages apart (prune)
        int8 = (FbgemmInt8Linear, Int8WeightLinear)
        self.weights = "int8" if any(isinstance(m, int8) for m in model.modules()) else "fp32"
        self.packed = [layer.packed for layer in fbgemm_layers(model)]  # every package's last inputs (Program)

    def pays(self, sentences: int, per: int) -> bool:
        """Whether a search of `sentences` sentences of `per` rows each runs compiled (the module's pays)."""
        return pays(sentences, per)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src [B, S] -> every decoder layer's cross-attention keys/values [L, 2, B, H, S, Dh] in the place of the
        encoder's output (the search only hands it to init_cache, and cross_kv passes it on), and src_pad_mask."""
        run = self.runner(0, self.encoder_threads(src.size(0), torch.get_num_threads()), encoder=True,
                          exact=False)
        cross_kv, src_pad_mask = run(src.contiguous())
        return cross_kv, src_pad_mask

    def encoder_threads(self, sentences: int, threads: int) -> int:
        """The threads the encoder runs a batch of `sentences` on, `threads` being the batch's: its steps' rule
        (threads_for) at a row per sentence, as the encoder's work per sentence is a step's order of magnitude."""
        return threads_for(sentences, threads, self.step_bytes)

    def prepare(self, sentences: int, beam: int, special: Any, threads: int) -> None:
        """Load, or compile, the packages a search of `sentences` sentences at `beam` on `threads` threads runs:
        the encoder's and the step's (beam search's whole step, or greedy search's decoder step), before it runs
        (a bench, a server warming up)."""
        rows = rows_bucket(sentences, beam)
        self.runner(0, self.encoder_threads(sentences, threads), encoder=True)
        self.runner(rows, threads_for(rows, threads, self.step_bytes), beam if beam > 1 else None, special)

    def cross_kv(self, memory: Tensor) -> Tensor:
        return memory  # encode computed them

    def step_runner(self, cache: PaddedCache, K: int | None, special: Any) -> StepRunner:
        """The package of the cache's bucket on the batch's threads, or one of its rows built for other threads."""
        bucket = cache.self_kv.size(3)
        return self.runner(bucket, threads_for(bucket, torch.get_num_threads(), self.step_bytes), K, special,
                           exact=False)

    def runner(self, rows: int, threads: int, K: int | None = None, special: Any = None,
               encoder: bool = False, exact: bool = True) -> Callable[..., Any]:
        """The loaded package for `rows` rows (a bucket) on `threads` threads: the decoder's step, with K (and the
        tokenizer's `special` ids) a beam step, with `encoder` the encoder (any batch: rows 0). From disk, or
        compiled first. Not `exact` (a search's), a package of these rows built for another thread count stands in
        rather than the search stopping for a minute to compile: FreeCores changes the count with the machine's
        load, and a package runs on any (it is tuned for its own). Called with the inputs' tensors, it returns a
        list of the outputs'."""
        kind = "encode" if encoder else "step" if K is None else f"beam{K}-{special.bos}.{special.eos}.{special.pad}"
        key = (kind, rows, threads)
        if key not in self.runners or (exact and key in self.stand_ins):
            path = self._path(kind, rows, threads)
            stand_in = None if path.exists() or exact else self._built_for_other_threads(kind, rows, threads)
            if stand_in is None and not path.exists():
                what = "encoder" if encoder else f"decoder's {kind} for {rows} rows"
                self.announce(f"compiling the {what} on {threads} thread(s), once: {path}")
                build(self._module(kind, K, special), self._inputs(kind, rows, K), threads, path, self.packed)
                prune(self.directory, self._prefix(kind, rows, threads), path)
            (self.stand_ins.add if stand_in else self.stand_ins.discard)(key)
            boxed_run, packed = load(stand_in or path).boxed_run, self.packed
            self.runners[key] = lambda *tensors: boxed_run([*tensors, *packed])
        return self.runners[key]

    def _prefix(self, kind: str, rows: int, threads: int) -> str:
        return f"{kind}-{self.weights}-{rows}rows-{threads}t" if rows else f"{kind}-{self.weights}-{threads}t"

    def _path(self, kind: str, rows: int, threads: int) -> Path:
        key = package_key(self.model, kind, rows, threads)
        return self.directory / f"{self._prefix(kind, rows, threads)}-{key}.pt2"

    def _built_for_other_threads(self, kind: str, rows: int, threads: int) -> Path | None:
        """This checkpoint's package of `kind` and `rows` for the nearest other thread count, if one is on disk."""
        counts = range(1, max(threads, os.cpu_count() or 1) + 1)
        for other in sorted((t for t in counts if t != threads), key=lambda t: abs(t - threads)):
            if any(self.directory.glob(f"{self._prefix(kind, rows, other)}-*.pt2")):
                path = self._path(kind, rows, other)  # named by these weights and this code, or stale
                if path.exists():
                    return path
        return None

    def _module(self, kind: str, K: int | None, special: Any) -> nn.Module:
        if kind == "encode":
            return _Encode(self.model)
        return step_program(self.model, K, special)

    def _inputs(self, kind: str, rows: int, K: int | None) -> tuple[Tensor, ...]:
        """Example inputs: a step's (example_inputs), or 3 sources of 7 tokens (none of them padding)."""
        return (torch.full((3, 7), self.model.pad_id + 1),) if kind == "encode" else example_inputs(self.model, rows, K)
