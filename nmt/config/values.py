"""How a config value read from YAML or `--set` becomes the type its dataclass field declares, and the closest valid
name for a misspelt one: the rules every config section shares (nmt.config.experiment applies them to each key)."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from nmt.errors import ConfigError


def closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def check_type(key: str, value: Any, annotation: Any) -> Any:
    """Coerce/validate `value` against a dataclass field annotation (str form, from __future__)."""
    hint = eval(annotation, vars(typing) | {"types": types}) if isinstance(annotation, str) else annotation
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(f"config key '{key}' must not be null")
    for t in allowed:
        base = typing.get_origin(t) or t
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if base is float and isinstance(value, str):  # YAML 1.1 reads "5e-4" as a string
            try:
                return float(value)
            except ValueError:
                pass
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if base is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        if base is list and isinstance(value, list):
            return value
    names = "/".join(getattr(t, "__name__", str(t)) for t in allowed)
    raise ConfigError(f"config key '{key}' expects {names}, got {value!r}")
