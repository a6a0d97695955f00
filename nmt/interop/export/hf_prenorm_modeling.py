"""Shipped, not imported by nmt: `nmt export --to hf` copies this file as modeling_nmt_prenorm.py into the directory
of a pre-norm model that Pegasus cannot hold (two embedding matrices: separate source and target vocabularies, or an
untied source embedding), and config.json's `auto_map` names its classes, so that

    AutoModelForSeq2SeqLM.from_pretrained(directory, trust_remote_code=True)

runs nmt's pre-norm Transformer with Marian's everything else (embeddings, sine/cosine positions, attention,
cache, generate()). Marian's layers are post-norm, x -> LayerNorm(x + sublayer(x)); the hooks below make each
sub-layer read LayerNorm(x) and the layer's own LayerNorm call pass its input through, which is pre-norm,
x -> x + sublayer(LayerNorm(x)), and each stack ends with its final LayerNorm (`layer_norm`, as in Pegasus).
Hooks rather than rewritten forward()s: they depend only on which modules a layer calls, not on the arguments
transformers' versions pass between them. The parameter names stay Marian's. The config's model_type is not
Marian's, so that without trust_remote_code transformers refuses the directory rather than run it post-norm.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from transformers import MarianConfig, MarianMTModel


class NmtPreNormConfig(MarianConfig):
    model_type = "nmt_prenorm_marian"


def normalize(x: Tensor, norm: nn.LayerNorm) -> Tensor:
    """LayerNorm(x) without calling the module (its call is the post-norm one, passed through below)."""
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def reads_normalized(sublayer: nn.Module, norm: nn.LayerNorm) -> None:
    """The sub-layer's query input (hidden_states, the first argument) becomes LayerNorm(hidden_states); the
    cross-attention's keys and values (the encoder output, another argument) stay as they are."""

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
        if args:
            args = (normalize(args[0], norm), *args[1:])
        else:
            kwargs["hidden_states"] = normalize(kwargs["hidden_states"], norm)
        return args, kwargs

    sublayer.register_forward_pre_hook(hook, with_kwargs=True)


def passes_through(module: nn.Module, args: tuple[Any, ...], output: Tensor) -> Tensor:
    """The layer's post-norm call: pre-norm leaves the residual stream un-normalised."""
    return args[0]


def ends_normalized(stack: nn.Module, norm: nn.LayerNorm) -> None:
    """The stack's output (last_hidden_state, or the first element of a tuple) goes through its final LayerNorm."""

    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if isinstance(output, tuple):
            return (norm(output[0]), *output[1:])
        output.last_hidden_state = norm(output.last_hidden_state)  # a ModelOutput: sets its item too
        return output

    stack.register_forward_hook(hook)


class NmtPreNormMTModel(MarianMTModel):
    config_class = NmtPreNormConfig

    def __init__(self, config: NmtPreNormConfig):
        super().__init__(config)
        for stack in (self.model.encoder, self.model.decoder):
            stack.layer_norm = nn.LayerNorm(config.d_model)
            ends_normalized(stack, stack.layer_norm)
            for layer in stack.layers:
                pairs = [(layer.self_attn, layer.self_attn_layer_norm), (layer.fc1, layer.final_layer_norm)]
                if hasattr(layer, "encoder_attn"):
                    pairs.append((layer.encoder_attn, layer.encoder_attn_layer_norm))
                for sublayer, norm in pairs:
                    reads_normalized(sublayer, norm)
                    norm.register_forward_hook(passes_through)
