"""One tool worker process of `ToolExecutor` (executor.py): `python -m tailrl.tools.worker FD ARGS_JSON`.

Place in the flow: the executor's `WorkerPool` (tailrl/rewards/procpool.py, shared with the reward pool)
starts it as a fresh interpreter; `serve` runs `load`, which loads the tool refs and the environment
factory again here (so "file.py:function" loads in this process; no schemas, no transformers). It then
answers, in the order sent:

    ("tool", name, arguments)             -> (text, None) | (None, error)   a standalone tool
    ("open", session, row)                -> (text, None) | (None, error)   an environment instance's
                                             reset(**row); text "" when it returned None
    ("method", session, name, arguments)  -> (text, None) | (None, error)   that instance's method
    ("reward", session)                   -> Scored                         its get_reward(), settled
    ("close", session)                    -> None                           the instance is kept for reuse

`text` is observation.to_text of the return value (an awaitable is awaited first); `error` is
"TypeName: message" of whatever the call raised (SystemExit included: this worker goes on). A session
this process does not hold (its worker was replaced after a timeout or a crash) answers an error.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from tailrl.rewards.procpool_child import serve
from tailrl.rewards.scoring import Scored, settle
from tailrl.rewards.timeout import Outcome
from tailrl.tools.environment import environment_methods, resolve_factory
from tailrl.tools.observation import to_text
from tailrl.tools.schema import resolve_tool

Answer = tuple[str | None, str | None]

LOST = ("its environment instance is gone: the worker process that held it was replaced after a tool call "
        "timed out or crashed there")


class _Sessions:
    """The environment instances of this worker: session id -> (instance, its tool methods)."""

    def __init__(self, factory: Callable[[], Any] | None):
        self.factory = factory
        self.live: dict[int, tuple[Any, dict[str, Callable[..., Any]]]] = {}
        self.free: list[tuple[Any, dict[str, Callable[..., Any]]]] = []  # closed instances, reused (TRL)
        self.unborn: dict[int, str] = {}  # sessions whose instance could not be created: why

    def open(self, session: int, row: dict) -> Answer:
        if self.factory is None:
            return None, "no environment is configured"
        try:
            entry = self.free.pop() if self.free else _with_methods(self.factory())
        except BaseException as e:
            self.unborn[session] = f"creating the environment failed: {_error(e)}"
            return None, self.unborn[session]
        self.live[session] = entry
        try:
            text = _run(entry[0].reset, row)
        except BaseException as e:
            return None, f"reset() failed: {_error(e)}"
        if text is not None and not isinstance(text, str):
            return None, f"reset() must return a str or None, got {type(text).__name__}"
        return text or "", None

    def method(self, session: int, name: str, arguments: dict) -> Answer:
        entry = self.live.get(session)
        if entry is None:
            return None, self.unborn.get(session, LOST)
        if name not in entry[1]:
            return None, f"the environment has no tool '{name}'"
        return _call(entry[1][name], arguments)

    def reward(self, session: int) -> Scored:
        entry = self.live.get(session)
        if entry is None:
            return Scored(failure=self.unborn.get(session, LOST))
        try:
            return settle(Outcome(value=_run(entry[0].get_reward, {})))
        except BaseException as e:
            return settle(Outcome(error=e))

    def close(self, session: int) -> None:
        entry = self.live.pop(session, None)
        self.unborn.pop(session, None)
        if entry is not None:
            self.free.append(entry)


def load(args: dict):
    """(tool names, answer) for the tools and environment in `args` (see procpool_child.serve)."""
    tools = dict(resolve_tool(ref)[:2] for ref in args["tools"])
    factory = resolve_factory(args["environment"])[1] if args["environment"] else None
    sessions = _Sessions(factory)

    def answer(message: tuple) -> Any:
        kind = message[0]
        if kind == "tool":
            _, name, arguments = message
            return _call(tools[name], arguments) if name in tools else (None, f"no tool '{name}' here")
        if kind == "method":
            return sessions.method(*message[1:])
        if kind == "open":
            return sessions.open(*message[1:])
        if kind == "reward":
            return sessions.reward(message[1])
        if kind == "close":
            return sessions.close(message[1])
        raise ValueError(f"unknown message {kind!r}")  # a bug in the executor: the worker exits

    return sorted(tools), answer


def _with_methods(instance: Any) -> tuple[Any, dict[str, Callable[..., Any]]]:
    return instance, environment_methods(instance)


def _call(fn: Callable[..., Any], arguments: dict) -> Answer:
    try:
        return to_text(_run(fn, arguments)), None
    except BaseException as e:  # SystemExit too: the call failed, this worker goes on
        return None, _error(e)


def _run(fn: Callable[..., Any], arguments: dict) -> Any:
    value = fn(**arguments)
    if inspect.isawaitable(value):  # an async tool, method or get_reward (TRL awaits them too)
        value = asyncio.run(_wait_for(value))
    return value


async def _wait_for(awaitable: Any) -> Any:
    return await awaitable


def _error(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


if __name__ == "__main__":
    serve(load)
