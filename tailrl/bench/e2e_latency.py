"""`tailrl bench e2e --task tools --tool-latency S`: the tools task's calculator behind a fixed latency (a tool
served by another process or machine: a code sandbox, a search API), the same function for both systems.

The function is written to a file in the bench folder, so tailrl's tool workers import it by reference
(`rollout.tools=[FILE.py:calculator]`, `rollout.tool_workers` processes) and TRL gets the same function
object (`tools=`), or with --trl-async-tool an `async def` twin. TRL runs a synchronous tool's calls one
after another between generation turns, and gathers an async tool's calls per completion only (TRL 1.16's
`_tool_call_loop`), so calls of different completions still run in series; tailrl parks a calling sequence
while the others keep decoding and runs the calls on `--tool-workers` processes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tailrl.bench.e2e_tasks import E2ETask
from tailrl.tools.schema import resolve_tool

SOURCE = '''"""The calculator behind a fixed latency (written by tailrl bench e2e --tool-latency)."""

import asyncio
import time

from tailrl.tools.builtin import calculator as _calculator

LATENCY_S = {latency!r}


{prefix}def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with numbers, + - * / // % **, and parentheses.

    Args:
        expression: The expression to evaluate, for example "(2 + 3) * 4 ** 2 / 7".

    Returns:
        The value, or a line starting with "Error:" saying why there is none.
    """
    {wait}
    return _calculator(expression)
'''


def _write(folder: Path, name: str, latency_s: float, use_async: bool) -> str:
    path = folder / f"{name}.py"
    path.write_text(SOURCE.format(latency=float(latency_s), prefix="async " if use_async else "",
                                  wait="await asyncio.sleep(LATENCY_S)" if use_async else "time.sleep(LATENCY_S)"))
    return f"{path.resolve()}:calculator"


def with_latency(task: E2ETask, latency_s: float, folder: Path, workers: int,
                 trl_async: bool = False) -> tuple[E2ETask, list[str]]:
    """(the task with the slow calculator as its TRL tool, tailrl's overrides for it). trl_async: TRL gets an
    `async def` twin that awaits the latency, tailrl the plain one."""
    if not task.tools:
        raise ValueError("--tool-latency needs a task with tools (--task tools)")
    folder.mkdir(parents=True, exist_ok=True)
    ref = _write(folder, "latency_tools", latency_s, False)
    trl_ref = _write(folder, "latency_tools_async", latency_s, True) if trl_async else ref
    _, fn, _ = resolve_tool(trl_ref)
    return replace(task, tools=(fn,)), [f"rollout.tools=[{ref}]", f"rollout.tool_workers={workers}",
                                        f"rollout.tool_timeout_s={max(10.0, 20 * latency_s)}"]
