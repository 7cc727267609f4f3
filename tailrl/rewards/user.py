"""Turn a reward ref string into (name, function): a registry name, `package.module:function`, or
`path/to/file.py:function`. Every way this can fail is a UserError with one line saying what to fix.

The command-line entry point does not put the working directory on sys.path, so a loose file in the
current folder is best named by path (`./my_rewards.py:score`). A file is loaded as its own module
(its folder is not added to sys.path); loading the same file twice reuses the first load.
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

__all__ = ["resolve", "valid_refs"]


def valid_refs() -> str:
    return f"{', '.join(sorted(REWARDS))}, or package.module:function, or path/to/file.py:function"


def resolve(ref: str) -> tuple[str, RewardFn]:
    """The metric name and function for one ref; the name is the registry name or the function's name."""
    ref = ref.strip()
    if ref in REWARDS:
        return ref, REWARDS[ref]
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise UserError(f"unknown reward '{ref}'; valid: {valid_refs()}")
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    module = _load_file(target, ref) if is_file else _import(target, ref)
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            names = ", ".join(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise UserError(
                f"reward '{ref}': '{target}' has no '{attr}' (callables there: {names or 'none'})"
            )
    _check_signature(fn, ref)
    return attr.rsplit(".", 1)[-1], fn


def _import(module_name: str, ref: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            hint = " (for a file use path/to/file.py:function)"
            raise UserError(f"reward '{ref}': no module named '{module_name}'{hint}") from e
        raise UserError(f"reward '{ref}': importing '{module_name}' failed: {_one_line(e)}") from e
    except Exception as e:
        raise UserError(f"reward '{ref}': importing '{module_name}' failed: {_one_line(e)}") from e


def _load_file(path_text: str, ref: str) -> ModuleType:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"reward '{ref}': file not found: {path}")
    # A stable, unique module name per file, registered in sys.modules so pickling and dataclasses work.
    name = f"tailrl_user_reward_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UserError(f"reward '{ref}': cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise UserError(f"reward '{ref}': loading {path} failed: {_one_line(e)}") from e
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
