"""A compiled decoder step (`nmt translate --compile`, `nmt serve --compile`): the static-shape step of
nmt.search.static compiled ahead of time by AOTInductor into a package that is saved on disk, so the compile is paid
once per model, row bucket, thread count and machine, and a later start only loads it (milliseconds).

Why compile: at a few rows a step is hundreds of small operators, each paying PyTorch's dispatch and a library call,
and torch's float32 matrix multiply (MKL's sgemm) runs small-M products slowly on some CPUs (AMD EPYC). Inductor with
`max_autotune` writes C++ micro-kernels for the exact matrix shapes (its CPP GEMM template), fuses the rest, and
AOTInductor calls it all from C++ with no Python in between. `python bench/translate.py --compile` measures it.

Shapes: a package serves one row count, since the GEMM template specialises on the matrices' M. A batch of N rows runs
in the package of the next power of two, its extra rows padded (token 0 against a one-position source) and dropped.
The source length and the cache's capacity are dynamic: one package serves every batch of its rows. The kernels'
thread count is fixed when they are compiled, so it is part of a package's key too.

A package is named by what it was built from (the weights, the model's and this module's code, torch, the CPU's
instruction set, rows, threads): a changed checkpoint or a new torch builds a new one. Float32 on a CPU only."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from nmt.search import static
from nmt.search.static import StaticCache, StaticDecoder, static_step

# Inductor's GEMM autotuning: its C++ micro-kernels where they beat ATen's, what makes the step fast; the environment's
# NMT_COMPILE_AUTOTUNE=0 compiles in a third of the time a package that runs slower
AUTOTUNE = os.environ.get("NMT_COMPILE_AUTOTUNE", "1") != "0"
SMALL_ROWS = 16  # up to this many rows a step runs on one thread: a second one waits more than it helps


def rows_bucket(rows: int) -> int:
    """The package that serves `rows` rows: the next power of two."""
    return 1 << max(0, rows - 1).bit_length()


def threads_for(rows: int, threads: int) -> int:
    """The thread count a step of `rows` rows runs (and is compiled) with, `threads` being the batch's."""
    return 1 if rows <= SMALL_ROWS else max(1, threads)


class _Step(nn.Module):
    """static_step as a module: what torch.export captures, the model's weights its constants."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor) -> Tensor:
        return static_step(self.model, tokens, pos, self_kv, cross_kv, memory_mask)[0]


def package_dir(checkpoint: Path | None) -> Path:
    """Where a checkpoint's packages are kept: `<checkpoint>.compiled/` beside it where that can be written, else
    the user's cache (`$XDG_CACHE_HOME/nmt/compiled`, by default ~/.cache/nmt/compiled). A package's name says what
    it was built from, so one directory may hold several models'."""
    if checkpoint is not None:
        beside = Path(checkpoint).with_name(Path(checkpoint).name + ".compiled")
        if os.access(beside if beside.exists() else beside.parent, os.W_OK):
            return beside
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt" / "compiled"


def package_key(model: nn.Module, rows: int, threads: int) -> str:
    """What a package is built from, hashed: its weights, the code of the model and of the step, torch's version,
    the CPU's instruction set, rows, threads and AUTOTUNE."""
    h = hashlib.sha256()
    for code in (type(model).__module__, static.__name__, __name__):
        h.update(Path(__import__(code, fromlist=["_"]).__file__).read_bytes())
    h.update(f"{torch.__version__}|{torch.backends.cpu.get_cpu_capability()}|{rows}|{threads}|{AUTOTUNE}".encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def example_inputs(model: nn.Module, rows: int) -> tuple[Tensor, ...]:
    """Inputs of a step of `rows` rows: a 7-token source, a 9-position cache (different sizes, so that export keeps
    the two dimensions apart)."""
    layers, attn = model.decoder_layers, model.decoder_layers[0].self_attn
    L, H, Dh = len(layers), attn.n_heads, attn.d_head
    return (torch.zeros(rows, dtype=torch.long), torch.zeros((), dtype=torch.long),
            torch.zeros(L, 2, rows, H, 9, Dh), torch.zeros(L, 2, rows, H, 7, Dh),
            torch.ones(rows, 1, 1, 7, dtype=torch.bool))


def build(model: nn.Module, rows: int, threads: int, path: Path) -> None:
    """Compile the step of `rows` rows on `threads` threads into the package `path` (written whole, then renamed:
    a killed compile leaves no half package)."""
    positions = model.max_positions
    S = torch.export.Dim("S", min=1, max=positions)
    T = torch.export.Dim("T", min=2, max=positions + 1)
    shapes = (None, None, {4: T}, {4: S}, {3: S})
    wanted = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            program = torch.export.export(_Step(model).eval(), example_inputs(model, rows), dynamic_shapes=shapes)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".pt2", dir=path.parent)
            os.close(fd)
            try:
                tuned = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"} if AUTOTUNE else {}
                torch._inductor.aoti_compile_and_package(program, package_path=tmp,
                                                         inductor_configs={"freezing": True, **tuned})
                os.replace(tmp, path)
            finally:
                Path(tmp).unlink(missing_ok=True)
    finally:
        torch.set_num_threads(wanted)


class PaddedCache(StaticCache):
    """A StaticCache of `bucket` rows of which the first `rows` are the search's."""

    def __init__(self, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor, rows: int):
        super().__init__(self_kv, cross_kv, memory_mask)
        self.rows = rows

    def reorder(self, keep: Tensor | None, parents: Tensor) -> None:
        if keep is not None:
            raise ValueError("a static cache keeps every sentence's rows to the end of the search")
        B, per = parents.shape
        index = (parents + torch.arange(B, device=parents.device)[:, None] * per).flatten()
        spare = torch.arange(self.rows, self.self_kv.size(2), device=index.device)
        self.self_kv = self.self_kv.index_select(2, torch.cat([index, spare]))


class CompiledDecoder(StaticDecoder):
    """`model` (float32, on the CPU, plain nn.Linear layers) as nmt.search.loop.run uses a model, each step through
    its compiled package. Packages are looked for, and saved, in `directory`; `announce(message)` is told before a
    compile (about a minute each on two cores). `eager`: the same model as it runs eagerly (nmt.precision.prepare's
    packed layers), which encodes the source; default `model`."""

    def __init__(self, model: nn.Module, directory: Path, announce: Callable[[str], None] = lambda _: None,
                 eager: nn.Module | None = None):
        super().__init__(model)
        self.directory, self.announce, self.eager = Path(directory), announce, eager or model
        self.runners: dict[tuple[int, int], Callable[..., Tensor]] = {}

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.eager.encode(src)

    def runner(self, rows: int, threads: int) -> Callable[..., Tensor]:
        """The loaded package for `rows` rows (a bucket) on `threads` threads: from disk, or compiled first."""
        if (rows, threads) not in self.runners:
            path = self.directory / f"step-{rows}rows-{threads}t-{package_key(self.model, rows, threads)}.pt2"
            if not path.exists():
                self.announce(f"compiling the decoder step for {rows} rows on {threads} thread(s), once: {path}")
                build(self.model, rows, threads, path)
            self.runners[rows, threads] = torch._inductor.aoti_load_package(str(path))
        return self.runners[rows, threads]

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int, rows: int = 1) -> PaddedCache:
        cache = super().init_cache(memory, src_pad_mask, max_len, rows)
        N = cache.self_kv.size(2)
        extra = rows_bucket(N) - N
        pad = lambda kv: torch.cat([kv, kv.new_zeros(*kv.shape[:2], extra, *kv.shape[3:])], dim=2)  # noqa: E731
        mask = torch.cat([cache.memory_mask, cache.memory_mask.new_ones(extra, *cache.memory_mask.shape[1:])])
        return PaddedCache(pad(cache.self_kv), pad(cache.cross_kv), mask, N)

    def decode_step(self, tokens: Tensor, cache: PaddedCache, need_attention: bool = False
                    ) -> tuple[Tensor, Tensor | None]:
        if need_attention:
            raise ValueError("the compiled step gives no attention: decode with the model itself")
        if cache.step >= cache.self_kv.size(4):
            raise ValueError(f"a static cache of {cache.self_kv.size(4)} positions is full")
        bucket = cache.self_kv.size(2)
        padded = torch.cat([tokens, tokens.new_zeros(bucket - tokens.numel())])
        run = self.runner(bucket, threads_for(bucket, torch.get_num_threads()))
        logits = run(padded, cache.pos, cache.self_kv, cache.cross_kv, cache.memory_mask)[: tokens.numel()]
        cache.pos += 1
        cache.step += 1
        return logits, None
