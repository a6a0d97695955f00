"""The sentence splitter an exported Argos Translate package ships: a small rule-based model in MiniSBD's format,
so that Argos Translate and LibreTranslate split sentences offline, and the same way everywhere.

Why: Argos Translate (and LibreTranslate, which always uses it) splits each paragraph into sentences with MiniSBD
before translating. MiniSBD loads an ONNX model from the package's `minisbd/` directory when there is one, else
it DOWNLOADS a per-language model at first use (impossible offline, and a language it lacks falls back to
English's). So the package ships its own model, built here with onnx's helper API (never protobuf by hand). It
has no weights: the graph is the rule below, evaluated on MiniSBD's character ids.

MiniSBD's interface (minisbd 0.9.5): metadata `config` / `vocab` / `lexicon` (JSON); inputs `units` (int64
[batch, chars], ids from `vocab`, whitespace mapped to ' ', runs of spaces collapsed, <PAD>=0 after the text)
and `features` (float32 [batch, chars, 0]: no features); output float32 [batch, chars, 5] whose argmax per
character is 0 (inside a token), 1 (token ends here), 2 (sentence ends here) (3, 4: multi-word tokens, unused).
MiniSBD itself makes a paragraph's last character a sentence end.

The rule (`split_sentences` is the same rule in Python): a sentence ends after a run of sentence-final marks
(. ! ? … ‼ ⁇ ⁈ ⁉ ؟ ۔ । ॥ ։ ። and the CJK/fullwidth 。 ！ ？ ｡ ︒ ﹒ ﹖ ﹗), with at most two closing quotes or
brackets after it, when the next character is a space or the end of the paragraph, unless the word after that
space starts with a lowercase letter ("e.g. this", "approx. five" stay whole). After a CJK/fullwidth mark
the sentence ends whatever follows (those scripts put no space between sentences). "3.5", "U.S.A." and
"example.com" never split; an abbreviation before a capitalized word ("Dr. Smith") does: that is the rule's
limit, the price of a splitter that is the same on every machine and needs no download.
"""

from __future__ import annotations

import json
from typing import Any

from nmt.errors import NmtError

STOPS = ".!?\u2026\u203c\u2047\u2048\u2049\u061f\u06d4\u0964\u0965\u0589\u1362"
CJK_STOPS = "\u3002\uff01\uff1f\uff61\ufe12\ufe52\ufe56\ufe57"
CLOSERS = "\"')]}\u00bb\u201d\u2019\u203a\u300d\u300f\uff09\u3011\u3009\u300b\uff3d\uff5d"
# character categories: what the rule looks at
OTHER, END, SPACE, STOP, CJK, CLOSE, LOWER, EDGE = range(8)  # END: the <PAD> after the text; EDGE: past the input
LABELS = 5  # MiniSBD's classes
ONNX_OPSET, ONNX_IR = 13, 7  # old enough for every onnxruntime MiniSBD supports


def _lowercase() -> str:
    return "".join(c for c in map(chr, range(0x10000)) if c.islower() and not c.isspace())


def vocabulary() -> tuple[list[str], list[int]]:
    """MiniSBD's units in id order and the category of each id (<PAD> 0, <UNK> 1 as MiniSBD expects)."""
    units = ["<PAD>", "<UNK>", " "]
    categories = [END, OTHER, SPACE]
    for chars, category in ((STOPS, STOP), (CJK_STOPS, CJK), (CLOSERS, CLOSE), (_lowercase(), LOWER)):
        for c in chars:
            if c not in units:
                units.append(c)
                categories.append(category)
    return units, categories


def category(c: str) -> int:
    if c.isspace():
        return SPACE
    for chars, kind in ((STOPS, STOP), (CJK_STOPS, CJK), (CLOSERS, CLOSE)):
        if c in chars:
            return kind
    return LOWER if c.islower() else OTHER


# ---- the rule in Python (what the ONNX graph computes)


def _tail(cats: list[int], i: int, *kinds: int) -> bool:
    """A mark of `kinds` at i, or one followed by one or two closers that end at i."""
    at = lambda j: cats[j] if 0 <= j < len(cats) else EDGE  # noqa: E731
    return at(i) in kinds or at(i) == CLOSE and (at(i - 1) in kinds or at(i - 1) == CLOSE and at(i - 2) in kinds)


def labels(cats: list[int]) -> list[int]:
    """MiniSBD's label of each position of a paragraph's categories (a trailing END already appended)."""
    at = lambda j: cats[j] if 0 <= j < len(cats) else EDGE  # noqa: E731
    out = []
    for i, c in enumerate(cats):
        mark, cjk = _tail(cats, i, STOP, CJK), _tail(cats, i, CJK)
        runs_on = at(i + 1) in (STOP, CJK, CLOSE, EDGE)
        spaced = at(i + 1) in (SPACE, END) and not (at(i + 1) == SPACE and at(i + 2) == LOWER)
        if c == SPACE:
            out.append(1)
        elif mark and (spaced or cjk and not runs_on):
            out.append(2)
        else:
            out.append(1 if at(i + 1) in (SPACE, END) else 0)
    return out


def split_sentences(paragraph: str) -> list[str]:
    """The sentences MiniSBD finds in one paragraph (no newline in it) with the shipped model."""
    kept = [i for i, c in enumerate(paragraph) if not (c.isspace() and i > 0 and paragraph[i - 1].isspace())]
    cats = [category(paragraph[i]) for i in kept] + [END]
    ends = [kept[i] for i, label in enumerate(labels(cats)[:-1]) if label == 2]
    sentences, start = [], 0
    for end in ends + [len(paragraph) - 1]:
        if start <= end:
            sentences.append(paragraph[start:end + 1].strip())
        start = end + 1
    return [s for s in sentences if s]


# ---- the same rule as an ONNX graph


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise NmtError("--to argos needs the onnx package to build its sentence splitter: pip install onnx") from None
    return onnx


class _Graph:
    """A few onnx.helper calls with names made up as they are needed."""

    def __init__(self, onnx: Any) -> None:
        self.onnx, self.nodes, self.inits, self.count = onnx, [], [], 0

    def name(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def const(self, values: list[int], dtype: Any = None) -> str:
        name = self.name()
        kind = dtype if dtype is not None else self.onnx.TensorProto.INT64
        self.inits.append(self.onnx.helper.make_tensor(name, kind, [len(values)], values))
        return name

    def scalar(self, value: int) -> str:
        name = self.name()
        self.inits.append(self.onnx.helper.make_tensor(name, self.onnx.TensorProto.INT64, [], [value]))
        return name

    def op(self, kind: str, *inputs: str, **attrs: Any) -> str:
        out = self.name()
        self.nodes.append(self.onnx.helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def any_of(self, cats: str, *kinds: int) -> str:
        """cats in kinds (a bool tensor)."""
        result = self.op("Equal", cats, self.scalar(kinds[0]))
        for kind in kinds[1:]:
            result = self.op("Or", result, self.op("Equal", cats, self.scalar(kind)))
        return result

    def both(self, *conditions: str) -> str:
        result = conditions[0]
        for condition in conditions[1:]:
            result = self.op("And", result, condition)
        return result

    def either(self, *conditions: str) -> str:
        result = conditions[0]
        for condition in conditions[1:]:
            result = self.op("Or", result, condition)
        return result

    def shift(self, cats: str, by: int) -> str:
        """cats[:, i + by] at position i (EDGE past either end)."""
        pads = [0, 0, 0, by] if by > 0 else [0, -by, 0, 0]
        padded = self.op("Pad", cats, self.const(pads), self.scalar(EDGE))
        start, end = (by, 2**62) if by > 0 else (0, by)
        return self.op("Slice", padded, self.const([start]), self.const([end]), self.const([1]))


def _rule(g: _Graph, cats: str) -> str:
    """The labels (int64 [batch, chars]) of `labels` as graph nodes."""
    p2, p1, n1, n2 = (g.shift(cats, by) for by in (-2, -1, 1, 2))
    close, close1 = g.any_of(cats, CLOSE), g.any_of(p1, CLOSE)

    def tail(*kinds: int) -> str:
        return g.either(g.any_of(cats, *kinds), g.both(close, g.any_of(p1, *kinds)),
                        g.both(close, close1, g.any_of(p2, *kinds)))

    mark, cjk = tail(STOP, CJK), tail(CJK)
    runs_on = g.any_of(n1, STOP, CJK, CLOSE, EDGE)
    breaks = g.any_of(n1, SPACE, END)
    lower_next = g.both(g.any_of(n1, SPACE), g.any_of(n2, LOWER))
    spaced = g.both(breaks, g.op("Not", lower_next))
    sentence = g.both(mark, g.either(spaced, g.both(cjk, g.op("Not", runs_on))))
    space = g.any_of(cats, SPACE)
    token = g.op("Where", g.either(space, breaks), g.scalar(1), g.scalar(0))
    return g.op("Where", g.both(sentence, g.op("Not", space)), g.scalar(2), token)


def minisbd_model(lang: str) -> bytes:
    """The serialized ONNX model (with MiniSBD's metadata) that splits sentences by the rule above."""
    onnx = _onnx()
    helper, tp = onnx.helper, onnx.TensorProto
    units, categories = vocabulary()
    g = _Graph(onnx)
    cats = g.op("Gather", g.const(categories), "units")
    onehot = g.op("OneHot", _rule(g, cats), g.scalar(LABELS), g.const([0, 1], tp.FLOAT), axis=-1)
    g.nodes.append(helper.make_node("Identity", [onehot], ["scores"]))
    graph = helper.make_graph(
        g.nodes, "rule_sbd",
        [helper.make_tensor_value_info("units", tp.INT64, ["batch", "chars"]),
         helper.make_tensor_value_info("features", tp.FLOAT, ["batch", "chars", "features"])],
        [helper.make_tensor_value_info("scores", tp.FLOAT, ["batch", "chars", LABELS])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
                              producer_name="nmt export --to argos")
    model.ir_version = ONNX_IR
    vocab = {"lang": "", "idx": 0, "cutoff": 0, "lower": False, "_unit2id": {u: i for i, u in enumerate(units)},
             "_id2unit": units}
    config = {"feat_funcs": [], "max_seqlen": 1000, "batch_size": 32, "use_dictionary": False,
              "num_dict_feat": 0, "skip_newline": False, "no_ssplit": False}
    helper.set_model_props(model, {"lang_code": lang, "config": json.dumps(config),
                                   "vocab": json.dumps(vocab, ensure_ascii=False), "lexicon": "null"})
    onnx.checker.check_model(model)
    return model.SerializeToString()

