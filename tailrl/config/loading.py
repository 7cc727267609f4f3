"""Loading a configuration: YAML + dotted overrides into frozen dataclasses, and the resolved config saved.

    cfg = load_config("run.yaml", ["engine.max_batch_size=32", "rollout.temperature=0.7"])

Unknown keys and wrong types raise UserError naming the valid keys (or a moved key's new name). Any
frozen dataclass tree loads this way (the training Config, the simulator's SimConfig, one section).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from tailrl.config.sections import Config
from tailrl.errors import UserError


def _valid_keys(cls) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls))


class _BoolText(str):
    """An override's YAML boolean (off / on / yes / no / true / false) that keeps its text: a string field
    gets the text (`train.run_name=off` names the run "off"), any other field the boolean."""

    def __new__(cls, text: str, parsed: bool):
        self = super().__new__(cls, text)
        self.parsed = parsed
        return self


def _parsed(value: Any) -> Any:
    """value with every _BoolText inside (dicts, lists) back to its boolean: an untyped field gets what YAML
    read, and no _BoolText outlives loading (the config pickles and dumps as plain data)."""
    if isinstance(value, _BoolText):
        return value.parsed
    if isinstance(value, dict):
        return {k: _parsed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_parsed(v) for v in value)
    return value


def _coerce(value: Any, tp: Any, where: str, moved: dict) -> Any:
    """Check/convert one YAML value against a dataclass field type (moved: as _build)."""
    origin = typing.get_origin(tp)
    if isinstance(value, _BoolText) and str not in (tp, *typing.get_args(tp)):
        value = value.parsed
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected a mapping with keys {_valid_keys(tp)}, got {value!r}")
        return _build(tp, value, where, moved)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], where, moved)
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        if isinstance(value, (str, int, float)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, inner, f"{where}[]", moved) for v in value)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected a mapping, got {value!r}")
        return _parsed(dict(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise UserError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-6" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            hint = " (YAML reads off / on / yes / no / true / false as booleans: quote it)" if isinstance(value, bool) else ""
            raise UserError(f"{where}: expected a string, got {value!r}{hint}")
        return str(value)
    return _parsed(value)


def _moved(loc: str, moved: dict) -> str | None:
    """The new name of a key that moved (old dotted name -> new), matched by its tail so a section loaded on
    its own (`--engine spec.window=4`) is recognised too."""
    return next((new for old, new in moved.items() if old == loc or old.endswith("." + loc)), None)


def _build(cls, data: dict, where: str, moved: dict):
    """cls from data, checked key by key (choice keys by the section itself, config/fields.py); moved: the
    renamed keys of the config being loaded (its root class's `moved_keys`)."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            loc = f"{where}.{key}" if where else key
            new = _moved(loc, moved)
            if new is not None:
                raise UserError(f"config key '{loc}' moved to '{new}'")
            raise UserError(f"unknown config key '{loc}'; valid keys{' in ' + where if where else ''}: {_valid_keys(cls)}")
    kwargs = {}
    for key, value in data.items():
        loc = f"{where}.{key}" if where else key
        kwargs[key] = _coerce(value, hints[key], loc, moved)
    return cls(**kwargs)


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise UserError(f"override '{dotted}': '{p}' is not a section")
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """'a.b=3' -> ('a.b', 3); values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise UserError(f"override '{text}' must look like section.key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, bool):
        value = _BoolText(raw.strip(), value)
    return key.strip(), value


def config_from_dict(data: dict, cls=Config):
    """cls from a nested dict; a section loaded on its own (EngineConfig) knows the training config's moved keys."""
    return _build(cls, data or {}, "", getattr(cls, "moved_keys", Config.moved_keys))


def load_config(path: str | Path | None = None, overrides: list[str] = (), cls=Config):
    """Load a YAML file (optional) and apply dotted overrides; returns a frozen config."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise UserError(f"config file {p} is not valid YAML: {str(e).splitlines()[0]}") from e
        if not isinstance(data, dict):
            raise UserError(f"config file {p} must be a mapping of sections")
    for ov in overrides:
        key, value = parse_override(ov)
        set_dotted(data, key, value)
    return config_from_dict(data, cls)


def with_overrides(cfg, overrides: list[str]):
    """A frozen config with dotted overrides applied (as on the command line)."""
    tree = to_dict(cfg)
    for ov in overrides:
        set_dotted(tree, *parse_override(ov))
    return config_from_dict(tree, type(cfg))


def to_dict(cfg) -> dict:
    def conv(x):
        if isinstance(x, tuple):
            return [conv(v) for v in x]
        return x

    return {k: conv(v) for k, v in dataclasses.asdict(cfg).items()}  # asdict recursed into the sections


def dump_config(cfg, path: str | Path) -> None:
    """Save the resolved config (what actually ran) as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
