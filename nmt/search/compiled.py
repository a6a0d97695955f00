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
from nmt.search import static
from nmt.search.beam import Beam, Chosen, beam_rule
from nmt.search.package_store import load, prune
from nmt.search.scoring import Move, impossible_tokens, length_penalty_divisor, step_logits
from nmt.search.settings import SearchSettings
from nmt.search.static import StaticCache, StaticDecoder, cross_keys_values, decoder_step, next_lineage, static_step

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


def rows_bucket(sentences: int, per: int = 1) -> int:
    """The rows of the package that serves `sentences` sentences of `per` rows each: `per` times the next power of
    two."""
    return per << max(0, sentences - 1).bit_length()


def threads_for(rows: int, threads: int, weight_bytes: int) -> int:
    """The thread count a step of `rows` rows over `weight_bytes` of weights (step_bytes) runs, and is compiled,
    with, `threads` being the batch's."""
    return 1 if rows <= SMALL_ROWS and weight_bytes <= SMALL_BYTES else max(1, threads)


def step_bytes(model: nn.Module) -> int:
    """The bytes of weights a decoder step reads: its layers' and the output projection's (parameters, or buffers
    where they are int8: nmt.int8's layers)."""
    weights = [t for m in (model.decoder_layers, model.output) for t in (*m.parameters(), *m.buffers())]
    return sum(w.numel() * w.element_size() for w in {id(w): w for w in weights}.values())


class _Program(nn.Module):
    """What torch.export captures of `model`: its weights the program's constants, except the packed weights of its
    int8 layers (nmt.int8.FbgemmInt8Linear), handles to this process's memory, which are the program's last inputs
    (`*packed`, in the order of nmt.int8.fbgemm_layers: CompiledDecoder.packed)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model


class _Step(_Program):
    """static_step as a module."""

    def forward(self, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor,
                *packed: Tensor) -> Tensor:
        with packed_as_inputs(packed):
            return static_step(self.model, tokens, pos, self_kv, cross_kv, memory_mask)[0]


class _BeamStep(_Program):
    """One whole step of beam search, K beams per sentence: the decoder's step (decoder_step), the next-token
    log-probabilities (step_logits), the beam rule (beam_rule) and the cache's reorder, with nothing in between on
    the host. Its self_kv and lineage are the first P positions of the cache's (StaticCache.prefix): it writes this
    step's keys/values into self_kv in place, each row's into its own place, and the next step's lineage over the
    lineage (nmt.search.static.next_lineage: the reorder copies no keys or values), and returns beam_rule's Chosen
    as a tuple."""

    def __init__(self, model: nn.Module, K: int, bos: int, eos: int, pad: int):
        super().__init__(model)
        self.K, self.eos = K, eos
        self.register_buffer("impossible", impossible_tokens(model.tgt_embed.num_embeddings, bos, eos, pad))

    def forward(self, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor,
                lineage: Tensor, scores: Tensor, best: Tensor, limit: Tensor, row_limit: Tensor, t: Tensor,
                divisor: Tensor, min_len: Tensor, *packed: Tensor) -> tuple[Tensor, ...]:
        with packed_as_inputs(packed):
            logits, _, new = decoder_step(self.model, tokens, pos, self_kv, cross_kv, memory_mask, lineage=lineage)
        # the beam rule over logit + (score - lse): logprob + score, the log-probabilities never written
        masked, lse = step_logits(logits, row_limit.le(t), t < min_len, self.impossible)
        chosen = beam_rule(masked, scores - lse, best, limit, t, divisor, self.K, self.K, self.eos)[0]
        self_kv.index_copy_(0, pos[None], new)  # one position of each row: written in place, nothing else copied
        lineage.copy_(next_lineage(lineage, chosen.parent_rows, pos))  # in place: the first P positions of the cache's
        return tuple(chosen)


class _Encode(_Program):
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


def build(module: _Program, inputs: tuple[Tensor, ...], threads: int, path: Path,
          packed: Sequence[Tensor] = ()) -> None:
    """Compile `module` (a _Step, _BeamStep or _Encode) for these inputs' shapes, the free_dims left free, and the
    packed weights of its model's int8 layers (`packed`, the order of nmt.int8.fbgemm_layers), on `threads` threads,
    into the package `path` (written whole, then renamed: a killed compile leaves no half package)."""
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


class PaddedCache(StaticCache):
    """A StaticCache of `bucket` rows of which the first `rows` are the search's; `lineage` [T, bucket]: where a
    beam step's rows read their positions (nmt.search.static.next_lineage)."""

    def __init__(self, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor, rows: int):
        super().__init__(self_kv, cross_kv, memory_mask)
        self.rows = rows
        self.lineage: Tensor | None = None  # made by the first beam step: greedy needs none
        self.scalars: tuple[Tensor, Tensor, Tensor] | None = None  # a beam step's t, length penalty, min_len

    def rows_after(self, parents: Tensor) -> Tensor:
        """The search's rows as StaticCache has them, the padding rows after them staying where they are."""
        spare = torch.arange(self.rows, self.self_kv.size(3), device=parents.device)
        return torch.cat([super().rows_after(parents), spare])


def _padded(x: Tensor, size: int, value: float, dim: int = 0) -> Tensor:
    """x along dimension `dim` up to `size`, filled with `value`, contiguous: a package reads its inputs in the
    layout it was compiled for and checks none (a row limit expanded from one value has stride 0)."""
    if x.size(dim) == size:
        return x.contiguous()
    return torch.cat([x, x.new_full((*x.shape[:dim], size - x.size(dim), *x.shape[dim + 1:]), value)], dim=dim)


class CompiledDecoder(StaticDecoder):
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
        self.packed = [layer.packed for layer in fbgemm_layers(model)]  # every package's last inputs (_Program)

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
        return _Step(self.model) if K is None else _BeamStep(self.model, K, special.bos, special.eos, special.pad)

    def _inputs(self, kind: str, rows: int, K: int | None) -> tuple[Tensor, ...]:
        """Example inputs: a step's (example_inputs), or 3 sources of 7 tokens (none of them padding)."""
        return (torch.full((3, 7), self.model.pad_id + 1),) if kind == "encode" else example_inputs(self.model, rows, K)

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int, rows: int = 1) -> PaddedCache:
        """The static cache of `rows` rows per sentence, in a bucket's rows (nmt.search.static)."""
        B, bucket = src_pad_mask.size(0), rows_bucket(src_pad_mask.size(0), rows)
        cross_kv = _padded(self.cross_kv(memory), bucket // rows, 0.0, dim=2)  # [L, 2, B, H, S, Dh]
        return PaddedCache(static.self_cache(cross_kv, max_len, bucket), cross_kv,
                           _padded(~src_pad_mask[:, None, None], bucket // rows, True), B * rows)

    def decode_step(self, tokens: Tensor, cache: PaddedCache, need_attention: bool = False
                    ) -> tuple[Tensor, Tensor | None]:
        if need_attention:
            raise ValueError("the compiled step gives no attention: decode with the model itself")
        self._check_room(cache)
        bucket = cache.self_kv.size(3)
        run = self.runner(bucket, threads_for(bucket, torch.get_num_threads(), self.step_bytes), exact=False)
        logits = run(_padded(tokens, bucket, 0), cache.pos, cache.prefix(), cache.cross_kv, cache.memory_mask)[0]
        cache.pos += 1
        cache.step += 1
        return logits[: tokens.numel()], None

    def beam_step(self, beam: Beam, cache: PaddedCache, tokens: Tensor, t: int, settings: SearchSettings,
                  special: Any) -> Move:
        """Step t of `beam` (fixed rows, no trace, no attention) as one call of its package: the decoder's step, the
        beam rule, the cache's reorder. Its sentences are padded to the bucket's (scores -inf, done at once)."""
        self._check_room(cache)
        K, B, bucket = beam.K, beam.limit.numel(), cache.self_kv.size(3)
        run = self.runner(bucket, threads_for(bucket, torch.get_num_threads(), self.step_bytes), K, special,
                          exact=False)
        if cache.scalars is None:  # every step's t and length penalty, made once (a tensor costs ~10 us to make)
            T = cache.self_kv.size(0)
            divisors = [length_penalty_divisor(i + 1, settings.length_penalty, settings.length_penalty_type)
                        for i in range(T)]
            cache.scalars = torch.arange(T), torch.tensor(divisors, dtype=torch.float64), torch.tensor(settings.min_len)
            cache.lineage = torch.arange(bucket).expand(T, -1).contiguous()  # [T, bucket]
        steps, divisors, min_len = cache.scalars
        out = run(
            _padded(tokens, bucket, 0), cache.pos, cache.prefix(), cache.cross_kv, cache.memory_mask,
            cache.prefix(cache.lineage),
            _padded(beam.scores, bucket, float("-inf")), _padded(beam.finished.best, bucket // K, float("-inf")),
            _padded(beam.limit, bucket // K, 0), _padded(beam.row_limit, bucket, 0), steps[t], divisors[t], min_len)
        cache.pos += 1
        cache.step += 1
        if B * K < bucket:  # the padded sentences' part dropped
            out = [x[: B * K] if x.dim() == 1 and x.size(0) == bucket else x[:B] for x in out]
        return beam.take(t, Chosen(*out), None)
