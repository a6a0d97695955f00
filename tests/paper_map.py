"""The paper map: each section and equation of "Attention Is All You Need" (Vaswani et al., 2017) that nmt
implements, the code that implements it and the tests that prove it.

PAPER below is the one table. `python -m tests.paper_map` renders it into docs/paper.md, with each symbol's
file and line read from the live code (`inspect`); tests/test_paper_map.py fails when that page is stale, a
symbol is gone, a test id names no test, or a section has no test. After moving code: rerun the command.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "paper.md"
COMMAND = "python -m tests.paper_map"


@dataclass(frozen=True)
class Entry:
    section: str  # "§3.2.1"
    title: str
    quote: str  # the paper's words (or a close paraphrase), markdown
    symbols: tuple[str, ...]  # dotted names: nmt.model.MultiHeadAttention, nmt.train.loop.Trainer._build
    tests: tuple[str, ...]  # pytest ids: tests/core/test_model.py::test_name (no [param] suffix needed)
    note: str = ""  # where nmt goes beyond the paper or chooses something it leaves open


PAPER: tuple[Entry, ...] = (
    Entry("§3.1", "Encoder and decoder stacks",
          "The encoder is composed of a stack of N = 6 identical layers. Each layer has two sub-layers. [...] "
          "the decoder inserts a third sub-layer, which performs multi-head attention over the output of the "
          "encoder stack.",
          ("nmt.model.EncoderLayer", "nmt.model.DecoderLayer", "nmt.model.Transformer.encode",
           "nmt.model.Transformer.decode", "nmt.config.experiment.ModelConfig"),
          ("tests/test_paper.py::test_default_model_is_the_base_model_of_two_stacks_of_6_identical_layers",
           "tests/config/test_config.py::test_defaults_are_the_paper_base_model",
           "tests/config/test_config.py::test_paper_configs_match_table3",
           "tests/core/test_model.py::test_decoder_is_causal")),
    Entry("§3.1", "Residual connection and layer normalization around each sub-layer",
          "the output of each sub-layer is LayerNorm(x + Sublayer(x)), where Sublayer(x) is the function "
          "implemented by the sub-layer itself",
          ("nmt.model.ResidualNorm",),
          ("tests/test_paper.py::test_each_sublayer_output_is_layernorm_of_x_plus_sublayer_x",),
          note="`model.pre_norm: true` (the tiny demo configs) computes x + Sublayer(LayerNorm(x)) instead and "
               "ends each stack with a LayerNorm; the default is the paper's post-norm."),
    Entry("§3.2.1", "Scaled dot-product attention (eq. 1)",
          "Attention(Q, K, V) = softmax(QKᵀ / √d_k) V  (1)",
          ("nmt.model.scaled_dot_product_attention",),
          ("tests/test_paper.py::test_scaled_dot_product_attention_is_eq_1",
           "tests/core/test_model.py::test_output_shapes_and_attention_weights"),
          note="Training and search use PyTorch's fused `scaled_dot_product_attention` where it is faster; the "
               "written-out eq. 1 returns the attention weights too, and both give the same outputs."),
    Entry("§3.2.2", "Multi-head attention",
          "MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O where head_i = Attention(QW_i^Q, KW_i^K, VW_i^V); "
          "h = 8 parallel attention layers, or heads. For each of these we use d_k = d_v = d_model/h = 64.",
          ("nmt.model.MultiHeadAttention",),
          ("tests/test_paper.py::test_multi_head_attention_is_concat_of_heads_times_w_o",
           "tests/test_paper.py::test_default_model_is_the_base_model_of_two_stacks_of_6_identical_layers"),
          note="The h heads' projections W_i^Q, W_i^K, W_i^V are column blocks of one matrix (`qkv_proj`; "
               "cross-attention: `q_proj` and `kv_proj`)."),
    Entry("§3.2.3", "The three uses of attention",
          "In \"encoder-decoder attention\" layers, the queries come from the previous decoder layer, and the "
          "memory keys and values come from the output of the encoder. [...] The encoder contains self-attention "
          "layers. [...] We implement this [masking] inside of scaled dot-product attention by masking out "
          "(setting to −∞) all values in the input of the softmax which correspond to illegal connections.",
          ("nmt.model.EncoderLayer.forward", "nmt.model.DecoderLayer.forward", "nmt.model.MultiHeadAttention.forward",
           "nmt.model.MultiHeadAttention.memory_kv"),
          ("tests/test_paper.py::test_queries_keys_and_values_come_from_where_the_paper_says",
           "tests/test_paper.py::test_masking_sets_illegal_connections_to_minus_infinity_before_the_softmax",
           "tests/core/test_model.py::test_decoder_is_causal",
           "tests/core/test_model.py::test_padding_never_changes_real_positions")),
    Entry("§3.3", "Position-wise feed-forward networks (eq. 2)",
          "FFN(x) = max(0, xW₁ + b₁)W₂ + b₂  (2); [...] applied to each position separately and identically. "
          "[...] d_model = 512, and the inner-layer has dimensionality d_ff = 2048.",
          ("nmt.model.FeedForward",),
          ("tests/test_paper.py::test_feed_forward_is_eq_2_applied_to_each_position_separately",
           "tests/core/test_model.py::test_feed_forward_activation"),
          note="`model.activation: gelu | swish` replace max(0, ·) for imported models; relu is the default."),
    Entry("§3.4", "Embeddings multiplied by √d_model",
          "In the embedding layers, we multiply those weights by √d_model.",
          ("nmt.model.Transformer._embed",),
          ("tests/test_paper.py::test_embedding_is_e_times_sqrt_d_model_plus_the_positional_encoding",)),
    Entry("§3.4", "Shared embeddings and pre-softmax weights",
          "we share the same weight matrix between the two embedding layers and the pre-softmax linear "
          "transformation",
          ("nmt.model.TiedLinear", "nmt.model.Transformer"),
          ("tests/test_paper.py::test_logits_are_the_decoder_output_times_the_shared_embedding_matrix",
           "tests/core/test_model.py::test_embedding_tying"),
          note="The encoder embedding is shared only when source and target are one vocabulary "
               "(`data.joint_vocab`, as the paper's shared BPE); the output layer always is the target embedding."),
    Entry("§3.5", "Sinusoidal positional encoding",
          "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))",
          ("nmt.model.sinusoidal_positions",),
          ("tests/core/test_model.py::test_positional_encoding_matches_formula",
           "tests/test_paper.py::test_embedding_is_e_times_sqrt_d_model_plus_the_positional_encoding")),
    Entry("§5.3", "Adam with β₁ = 0.9, β₂ = 0.98, ε = 10⁻⁹",
          "We used the Adam optimizer with β₁ = 0.9, β₂ = 0.98 and ε = 10⁻⁹.",
          ("nmt.train.optim.adam", "nmt.train.loop.Trainer._build", "nmt.config.experiment.TrainConfig"),
          ("tests/test_paper.py::test_training_uses_adam_and_the_eq_3_learning_rate_of_configs_base_yaml",
           "tests/config/test_config.py::test_defaults_are_the_paper_base_model")),
    Entry("§5.3", "Learning-rate schedule (eq. 3)",
          "lrate = d_model^−0.5 · min(step_num^−0.5, step_num · warmup_steps^−1.5)  (3); "
          "We used warmup_steps = 4000.",
          ("nmt.train.optim.learning_rate", "nmt.train.loop.Trainer.update"),
          ("tests/test_paper.py::test_paper_configs_use_eq_3_with_4000_warmup_steps",
           "tests/test_paper.py::test_training_uses_adam_and_the_eq_3_learning_rate_of_configs_base_yaml",
           "tests/train/test_train.py::test_noam_schedule_matches_the_paper"),
          note="Eq. 3 is `train.schedule: noam` (`train.lr` multiplies it), set by configs/base.yaml and "
               "configs/big.yaml; the built-in default is fairseq's `inverse_sqrt` (linear warmup to `train.lr`)."),
    Entry("§5.4", "Residual dropout",
          "We apply dropout to the output of each sub-layer, before it is added to the sub-layer input and "
          "normalized. In addition, we apply dropout to the sums of the embeddings and the positional encodings "
          "in both the encoder and decoder stacks. For the base model, we use a rate of P_drop = 0.1.",
          ("nmt.model.ResidualNorm.forward", "nmt.model.Transformer._embed"),
          ("tests/test_paper.py::test_dropout_is_on_each_sublayer_output_and_on_the_embedding_sums",
           "tests/core/test_model.py::test_dropout_only_in_training")),
    Entry("§5.4", "Label smoothing",
          "During training, we employed label smoothing of value ε_ls = 0.1.",
          ("nmt.loss.label_smoothed_loss", "nmt.loss.projected_label_smoothed_loss"),
          ("tests/test_paper.py::test_label_smoothing_is_cross_entropy_against_the_smoothed_target_distribution",
           "tests/train/test_train.py::test_label_smoothing_against_hand_computation",
           "tests/core/test_loss.py::test_projected_loss_equals_the_plain_loss_and_its_gradients"),
          note="The smoothed target puts 1 − ε_ls on the reference token and spreads ε_ls uniformly over the "
               "whole vocabulary (the uniform prior of Szegedy et al., the paper's [36])."),
    Entry("§6.1", "Beam search: beam size 4, length penalty α = 0.6",
          "We used beam search with a beam size of 4 and length penalty α = 0.6.",
          ("nmt.search.beam.Beam.step", "nmt.search.scoring.length_penalty_divisor",
           "nmt.config.experiment.DecodeConfig"),
          ("tests/test_paper.py::test_translation_searches_with_beam_4_and_the_gnmt_length_penalty_0_6",
           "tests/search/test_search.py::test_beam_search_escapes_the_greedy_trap",
           "tests/search/test_search.py::test_length_penalty_reorders_hypotheses"),
          note="The penalty is GNMT's (Wu et al. 2016, the paper's [38]): log P(Y) / ((5 + |Y|) / 6)^α, "
               "|Y| counting EOS."),
    Entry("§6.1", "Checkpoint averaging",
          "For the base models, we used a single model obtained by averaging the last 5 checkpoints [...]. "
          "For the big models, we averaged the last 20 checkpoints.",
          ("nmt.checkpoint.average", "nmt.rundir.RunDir.average", "nmt.train.loop.Trainer._finish"),
          ("tests/test_paper.py::test_averaging_is_the_mean_of_the_last_checkpoints",
           "tests/train/test_train.py::test_training_writes_checkpoints_metrics_and_average"),
          note="Checkpoints are written every `train.save_every` updates (the paper: every 10 minutes)."),
    Entry("§6.1", "Maximum output length: input length + 50",
          "We set the maximum output length during inference to input length + 50, but terminate early when "
          "possible.",
          ("nmt.search.scoring.max_lengths", "nmt.config.experiment.DecodeConfig"),
          ("tests/test_paper.py::test_maximum_output_length_is_input_length_plus_50",
           "tests/search/test_search.py::test_forced_eos_at_max_length_per_sentence",
           "tests/search/test_search.py::test_max_length_respected_and_capped_by_positions"),
          note="`decode.max_len_a` × input + `decode.max_len_b` (1 and 50); the input length counts the "
               "source's EOS, the output's EOS is not counted."),
)


class MapError(LookupError):
    """A symbol of PAPER that the code does not have (moved, renamed, or not written yet)."""


# ---- symbols -> file:line


def resolve(dotted: str) -> Any:
    """The object a dotted name denotes: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
                continue  # not a module: the rest are attributes
            raise
        for j, name in enumerate(parts[i:], start=i):
            if not hasattr(obj, name):
                raise MapError(f"{dotted}: {'.'.join(parts[:j])} has no attribute '{name}'")
            obj = getattr(obj, name)
        return obj
    raise MapError(f"{dotted}: no module '{parts[0]}'")


def location(dotted: str) -> tuple[str, int]:
    """(path relative to the repository, line of its `def` or `class`) of a symbol."""
    obj = resolve(dotted)
    obj = inspect.unwrap(obj.fget if isinstance(obj, property) else obj)  # torch.no_grad() wraps searches
    try:
        path = Path(inspect.getsourcefile(obj) or "").resolve().relative_to(ROOT)
        lines, start = inspect.getsourcelines(obj)
    except (TypeError, OSError, ValueError) as e:
        raise MapError(f"{dotted}: no source in this repository ({e})") from None
    # getsourcelines starts at the first decorator; link the definition itself
    skip = next((i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ", "class "))), 0)
    return path.as_posix(), start + skip


def missing_symbols(entries: tuple[Entry, ...] = PAPER) -> list[str]:
    problems = []
    for dotted in dict.fromkeys(s for e in entries for s in e.symbols):
        try:
            location(dotted)
        except MapError as e:
            problems.append(str(e))
    return problems


# ---- test ids


def collected_tests(path: Path) -> set[str]:
    """The test functions pytest would collect from a file: test_* functions and Test*::test_* methods."""
    names: set[str] = set()
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, functions) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names |= {f"{node.name}::{f.name}" for f in node.body if isinstance(f, functions)
                      and f.name.startswith("test")}
    return names


def missing_tests(entries: tuple[Entry, ...] = PAPER) -> list[str]:
    problems, known = [], {}
    for test_id in dict.fromkeys(t for e in entries for t in e.tests):
        file, _, name = test_id.partition("::")
        path = ROOT / file
        if not path.is_file():
            problems.append(f"{test_id}: no file {file}")
            continue
        known.setdefault(file, collected_tests(path))
        if name.split("[")[0] not in known[file]:  # a parametrized id may carry its [..] suffix
            problems.append(f"{test_id}: {file} has no test {name}")
    return problems


def untested_sections(entries: tuple[Entry, ...] = PAPER) -> list[str]:
    return [f"{e.section} {e.title}: no {what}" for e in entries
            for what, items in (("code", e.symbols), ("test", e.tests)) if not items]


def problems() -> list[str]:
    return untested_sections() + missing_symbols() + missing_tests()


# ---- rendering


def _code_line(dotted: str) -> str:
    path, line = location(dotted)
    return f"- `{dotted}` — [{path}:{line}](../{path}#L{line})"


def _test_line(test_id: str) -> str:
    file = test_id.partition("::")[0]
    return f"- [`{test_id}`](../{file})"


def render_entry(e: Entry) -> list[str]:
    lines = [f"## {e.section} {e.title}", "", f"> {e.quote}", "", "Code:", ""]
    lines += [_code_line(s) for s in e.symbols]
    lines += ["", "Tests:", ""] + [_test_line(t) for t in e.tests]
    return lines + (["", f"Note: {e.note}"] if e.note else []) + [""]


def render(entries: tuple[Entry, ...] = PAPER) -> str:
    """docs/paper.md as it should read now. Raises MapError when a symbol is missing."""
    head = [
        "# The paper map",
        "",
        f"<!-- Generated by `{COMMAND}` from the table in tests/paper_map.py: edit that, not this file. -->",
        "",
        "Each section and equation of *Attention Is All You Need* (Vaswani et al., 2017) that nmt implements, "
        "the code that implements it and the tests that prove it. Line numbers are read from the code; "
        f"`tests/test_paper_map.py` fails when this page is out of date (regenerate it with `{COMMAND}`).",
        "",
    ]
    return "\n".join(head + [line for e in entries for line in render_entry(e)])


def main() -> int:
    found = problems()
    if found:
        print("docs/paper.md not written: tests/paper_map.py names what the code or the tests lack "
              "(a symbol moved or renamed: fix PAPER in tests/paper_map.py):", file=sys.stderr)
        for problem in found:
            print(f"  {problem}", file=sys.stderr)
        return 1
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render(), encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)} ({len(PAPER)} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
