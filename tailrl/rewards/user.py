"""Turn a reward ref string into (name, function): a registry name, `package.module:function`, or
`path/to/file.py:function`. Every way this can fail is a UserError with one line saying what to fix.

`load_attribute` is the loading half, shared with the tools (tailrl/tools/schema.py, environment.py):
any `module:attr` / `file.py:attr` ref -> the object, errors naming what was being loaded. The
command-line entry point does not put the working directory on sys.path, so a loose file in the current
folder is best named by path (`./my_rewards.py:score`). A file is loaded as its own module (its folder is
not added to sys.path); loading the same file twice reuses the first load. `ref_of` goes back: an object
that a worker process can load again -> its ref (None when it cannot: defined in __main__ or a function).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tailrl.errors import UserError
from tailrl.rewards.registry import REWARDS, RewardFn

__all__ = ["load_attribute", "ref_of", "resolve", "valid_refs"]

_FILE_MODULE = "tailrl_user_"  # prefix of the module names files are loaded under


def valid_refs() -> str:
    return f"{', '.join(sorted(REWARDS))}, or package.module:function, or path/to/file.py:function"


def resolve(ref: str) -> tuple[str, RewardFn]:
    """The metric name and function for one ref; the name is the registry name or the function's name."""
    ref = ref.strip()
    if ref in REWARDS:
        return ref, REWARDS[ref]
    if not _is_ref(ref):
        raise UserError(f"unknown reward '{ref}'; valid: {valid_refs()}")
    name, fn = load_attribute(ref, "reward")
    _check_signature(fn, ref)
    return name, fn


def load_attribute(ref: str, what: str) -> tuple[str, Any]:
    """`package.module:attr` or `path/to/file.py:attr` (attr may be dotted) -> (attr's last name, object).

    `what` ("reward", "tool", "environment") starts every error message: "tool 'x.py:f': file not found".
    """
    ref = ref.strip()
    if not _is_ref(ref):
        raise UserError(f"{what} '{ref}' is not module:name or path/to/file.py:name")
    target, _, attr = ref.rpartition(":")
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    module = _load_file(target, ref, what) if is_file else _import(target, ref, what)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            names = ", ".join(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise UserError(f"{what} '{ref}': '{target}' has no '{attr}' (callables there: {names or 'none'})")
    return attr.rsplit(".", 1)[-1], obj


def ref_of(obj: Any) -> str | None:
    """`module:qualname` (or `file.py:qualname` for a file loaded here) that loads `obj` again in another
    process; None for objects defined in __main__, inside a function, or without a module."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or not qualname or module_name == "__main__" or "<" in qualname:
        return None
    if module_name.startswith(_FILE_MODULE):
        path = getattr(sys.modules.get(module_name), "__file__", None)
        return f"{path}:{qualname}" if path else None
    return f"{module_name}:{qualname}"


def _is_ref(ref: str) -> bool:
    target, _, attr = ref.rpartition(":")
    return bool(target and attr)


def _import(module_name: str, ref: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            hint = " (for a file use path/to/file.py:name)"
            raise UserError(f"{what} '{ref}': no module named '{module_name}'{hint}") from e
        raise UserError(f"{what} '{ref}': importing '{module_name}' failed: {_one_line(e)}") from e
    except Exception as e:
        raise UserError(f"{what} '{ref}': importing '{module_name}' failed: {_one_line(e)}") from e


def _load_file(path_text: str, ref: str, what: str) -> ModuleType:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"{what} '{ref}': file not found: {path}")
    # A stable, unique module name per file, registered in sys.modules so pickling and dataclasses work.
    name = f"{_FILE_MODULE}{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UserError(f"{what} '{ref}': cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise UserError(f"{what} '{ref}': loading {path} failed: {_one_line(e)}") from e
    return module


def _check_signature(fn: Any, ref: str) -> None:
    """Fail at startup, not on every call, when `fn` cannot take (prompt, completion)."""
    if not callable(fn):
        raise UserError(f"reward '{ref}' is not callable (got {type(fn).__name__})")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: find out on the first call
    try:
        sig.bind_partial("prompt", "completion")
    except TypeError as e:
        raise UserError(f"reward '{ref}' must accept (prompt, completion, **row): {e}") from e


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
