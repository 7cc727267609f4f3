"""`ToolExecutor`: tool calls run in worker processes while the engine keeps decoding.

    with ToolExecutor(tools=["calculator", "my_tools.py:search"], environment="envs.py:Game",
                      workers=2, timeout_s=30) as ex:
        tok_ids = chat.render_ids(tok, messages, tools=ex.schemas, add_generation_prompt=True)
        session = ex.open(row)                    # one environment instance per rollout (TRL's contract)
        handle = session.submit(call)             # or ex.submit(call) without an environment; returns at once
        handle.done() -> bool                     # never blocks: poll it between decode steps
        handle.result() -> Observation            # the text the model sees (blocks if not done)
        session.reward().result() -> Scored       # the environment's get_reward(), settled like a reward
        session.close(); ex.metrics()             # tools/calls, errors, timeouts, latency, restarts

Place in the flow: engine -> parsers.py (ToolCall | ToolCallError) -> **submit** -> a worker
(worker.py) runs it -> **Observation** -> chat.py -> observation tokens appended to the parked sequence
(the engine and trainer wiring is not built yet).

A tool's failure never raises here; each becomes an error observation the model reads (as TRL's trainer
does) and is counted: a malformed call, an unknown tool, arguments that do not fit the schema (arguments.py: no
worker involved), a tool that raises or returns a non-text value (`tools/errors`), a call past
`timeout_s` (its worker is killed: `tools/timeouts`) and a worker that dies in a call (os._exit, a
segfault: `tools/errors`); a killed or dead worker is replaced (`tools/restarts`). The processes are the
reward pool's `WorkerPool` (tailrl/rewards/procpool.py).

Determinism: an observation's text depends only on the call (and, for an environment, its session's
earlier calls, which run in submission order on the worker holding the instance: sessions are pinned to
a worker slot, `session id % workers`). Latency and the order other calls finish in never change it.
Failures are the exception by nature: when a worker is replaced, the environment instances it held are
gone, and later calls of those sessions answer an error saying so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

from tailrl.errors import UserError
from tailrl.rewards.procpool import Reply, WorkerPool
from tailrl.rewards.scoring import Scored
from tailrl.rewards.user import ref_of
from tailrl.tools.arguments import check_arguments
from tailrl.tools.environment import Environment, load_environment
from tailrl.tools.observation import Observation, failed
from tailrl.tools.parsers import ToolCall, ToolCallError
from tailrl.tools.schema import check_unique, load_tools

__all__ = ["Session", "ToolExecutor", "ToolHandle"]

T = TypeVar("T")


class ToolHandle(Generic[T]):
    """One submitted call: `done()` polls without blocking, `result()` waits; the result is kept."""

    def __init__(self, convert: Callable[[Reply], T] | None = None, pool: WorkerPool | None = None,
                 ticket: int | None = None, value: T | None = None):
        self._convert, self._pool, self._ticket = convert, pool, ticket
        self._value = value
        self._done = pool is None  # no pool: answered at submit (a call refused before any worker)

    def done(self) -> bool:
        if not self._done:
            reply = self._pool.poll(self._ticket)
            if reply is not None:
                self._settle(reply)
        return self._done

    def result(self) -> T:
        if not self._done:
            self._settle(self._pool.wait(self._ticket))
        return self._value

    def _settle(self, reply: Reply) -> None:
        self._value, self._done = self._convert(reply), True


class Session:
    """One rollout's environment instance, living in worker slot `slot`; made by `ToolExecutor.open`.

    `reset` is the handle of its `reset(**row)`: an Observation named "reset" whose content is the text
    to append to the prompt (chat.append_reset), "" for None; on failure content is "" and error says why.
    """

    def __init__(self, executor: ToolExecutor, session_id: int, slot: int, reset: ToolHandle[Observation]):
        self.id, self.slot, self.reset = session_id, slot, reset
        self._executor = executor
        self.closed = False

    def submit(self, call: ToolCall | ToolCallError) -> ToolHandle[Observation]:
        """`executor.submit(call, self)`: environment methods run on this session's instance."""
        return self._executor.submit(call, self)

    def reward(self) -> ToolHandle[Scored]:
        """The environment's `get_reward()` for this episode, as a reward `Scored` (a number, a failure or a
        timeout; TRL logs it under the environment's class name, `executor.environment.name`)."""
        return self._executor._reward(self)

    def close(self) -> None:
        """Episode over: the instance goes back to its worker's free list (reused, reset again)."""
        if not self.closed:
            self.closed = True
            self._executor._close_session(self)


class ToolExecutor:
    """Tools and an optional environment served by `workers` processes; see the module docstring.

    Everything is loaded and checked here, before any model loads (UserError, one line): the tools
    (schema.py), the environment (environment.py), unique names across both; then the workers start.
    """

    def __init__(self, tools: Sequence[str | Callable[..., Any]] = (),
                 environment: str | Callable[[], Any] | None = None, workers: int = 2, timeout_s: float = 30.0):
        if workers < 1:
            raise UserError(f"a tool executor needs at least 1 worker process, got {workers}")
        if not math.isfinite(timeout_s):
            raise UserError(f"the tool timeout must be a finite number of seconds (<= 0: none), got {timeout_s}")
        self.timeout_s, self.workers = float(timeout_s), workers
        self.tools = load_tools(tools)
        self.environment: Environment | None = load_environment(environment) if environment is not None else None
        methods = self.environment.tools if self.environment else []
        if not self.tools and self.environment is None:
            raise UserError("a tool executor needs at least one tool or an environment")
        check_unique([*self.tools, *methods])
        self.schemas: list[dict] = [t.schema for t in [*self.tools, *methods]]  # the chat template's tools=
        self._by_name = {t.name: t for t in [*self.tools, *methods]}
        self._methods = {t.name for t in methods}
        refs = [ref_of(t.fn) or t.ref for t in self.tools]  # importable in a worker, also for a plugin's TOOLS name
        args = {"tools": refs, "environment": self.environment.ref if self.environment else None}
        loading = f"the tools {refs}" + (f" and environment '{args['environment']}'" if self.environment else "")
        self._pool = WorkerPool("tailrl.tools.worker", args, workers, self.timeout_s, what="tool", loading=loading)
        self._next_session = 0
        self._restarts_seen = 0
        self._counts = dict.fromkeys(("calls", "errors", "timeouts", "env_errors"), 0)
        self._latencies: list[float] = []

    # -- calls ------------------------------------------------------------------------------------
    def submit(self, call: ToolCall | ToolCallError, session: Session | None = None) -> ToolHandle[Observation]:
        """Start one call and return its handle at once. A call refused before any worker (malformed,
        unknown tool, bad arguments) is done already. An environment method needs the rollout's session."""
        self._counts["calls"] += 1
        if isinstance(call, ToolCallError):
            return self._refused(failed(call.name, call.error))
        tool = self._by_name.get(call.name)
        if tool is None:
            known = ", ".join(self._by_name) or "none"
            return self._refused(failed(call.name, f"unknown tool '{call.name}'; available: {known}"))
        problem = check_arguments(tool.schema, call.arguments)
        if problem is not None:
            return self._refused(failed(call.name, f"tool '{call.name}': {problem}"))
        if call.name in self._methods:
            if session is None or session.closed:
                raise ValueError(f"tool '{call.name}' is an environment method: submit it with the rollout's open "
                                 "session")
            ticket = self._pool.submit(("method", session.id, call.name, call.arguments), slot=session.slot)
        else:
            ticket = self._pool.submit(("tool", call.name, call.arguments))
        return ToolHandle(partial(self._observe, call.name), self._pool, ticket)

    def _refused(self, observation: Observation) -> ToolHandle[Observation]:
        self._counts["errors"] += 1
        return ToolHandle(value=observation)

    def _observe(self, name: str, reply: Reply) -> Observation:
        self._latencies.append(reply.seconds)
        if reply.timed_out:
            self._counts["timeouts"] += 1
            return failed(name, f"tool '{name}' timed out after {self.timeout_s:g} s", timed_out=True)
        if reply.failure is not None:
            self._counts["errors"] += 1
            return failed(name, f"tool '{name}' crashed: {reply.failure}")
        text, error = reply.message
        if error is not None:
            self._counts["errors"] += 1
            return failed(name, error)
        return Observation(name, text)

    # -- environment sessions ---------------------------------------------------------------------
    def open(self, row: dict | None = None) -> Session:
        """A new episode: an environment instance in worker slot `id % workers`, `reset(**row)` started
        (row: the dataset row, as TRL passes it). Returns at once; poll `session.reset`."""
        if self.environment is None:
            raise ValueError("open() needs an environment; this executor has only standalone tools")
        session_id, self._next_session = self._next_session, self._next_session + 1
        slot = session_id % self.workers
        ticket = self._pool.submit(("open", session_id, dict(row or {})), slot=slot)
        return Session(self, session_id, slot, ToolHandle(self._reset_observation, self._pool, ticket))

    def _reset_observation(self, reply: Reply) -> Observation:
        text, error = (None, None) if reply.failure or reply.timed_out else reply.message
        if text is not None:
            return Observation("reset", text)
        self._counts["env_errors"] += 1
        why = error or ("timed out" if reply.timed_out else reply.failure)
        return Observation("reset", "", error=f"environment reset failed: {why}", timed_out=reply.timed_out)

    def _reward(self, session: Session) -> ToolHandle[Scored]:
        if self.environment is None or not self.environment.has_reward:
            raise ValueError("the environment defines no get_reward()")
        ticket = self._pool.submit(("reward", session.id), slot=session.slot)
        return ToolHandle(self._scored, self._pool, ticket)

    def _scored(self, reply: Reply) -> Scored:
        if reply.timed_out or reply.failure is not None or reply.message.failure is not None:
            self._counts["env_errors"] += 1
        if reply.timed_out:
            return Scored(timed_out=True)
        return Scored(failure=reply.failure) if reply.failure is not None else reply.message

    def _close_session(self, session: Session) -> None:
        self._pool.discard(self._pool.submit(("close", session.id), slot=session.slot))

    # -- bookkeeping ------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Counts since the last call: tools/calls, /errors, /timeouts, /env_errors (reset or get_reward
        failed), /restarts (workers replaced), /latency_mean_s and /latency_max_s (submit to reply)."""
        restarts = self._pool.restarts
        out = {f"tools/{key}": float(value) for key, value in self._counts.items()}
        out["tools/restarts"] = float(restarts - self._restarts_seen)
        lat = self._latencies
        out["tools/latency_mean_s"] = sum(lat) / len(lat) if lat else 0.0
        out["tools/latency_max_s"] = max(lat, default=0.0)
        self._restarts_seen, self._latencies = restarts, []
        self._counts = dict.fromkeys(self._counts, 0)
        return out

    def worker_pids(self) -> list[int]:
        """The worker processes started and not yet reaped."""
        return self._pool.pids()

    def close(self) -> None:
        """Stop the workers (idle ones exit, busy ones are killed); never hangs. Handles not done raise."""
        self._pool.close()

    def __enter__(self) -> ToolExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
