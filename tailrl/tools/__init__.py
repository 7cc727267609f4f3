"""Tools for multi-turn rollouts (issue #30): the foundations and the engine's side (turns.py: ToolTurns, the
engine's Turns for tool calls); the trainer's side is not wired yet.

    ex = ToolExecutor(tools=["calculator", "path/to/tools.py:search"], environment="envs.py:Game")
    ids = render_ids(tok, messages, tools=ex.schemas, add_generation_prompt=True)
    content, calls = TOOL_PARSERS.get("hermes")(turn_text)        # ToolCall | ToolCallError each
    handles = [session.submit(c) for c in calls]                  # poll handle.done() while decoding
    suffix = observation_ids(tok, tool_messages([h.result() for h in handles]))

- schema.py: a tool = a typed, Google-docstring function; its schema is transformers' get_json_schema;
  refs `module:fn`, `file.py:fn`, TOOLS names; arguments.py checks a call's arguments against it.
- environment.py: TRL's environment_factory contract (reset / get_reward / public methods as tools).
- parsers.py: TOOL_PARSERS (hermes, llama3_json): text -> (content, calls).
- chat.py: tool messages, chat-template token ids, the observation suffix (TRL's method).
- observation.py: the text the model sees, errors included; builtin.py: calculator, python (sandbox.py).
- executor.py + worker.py: calls in worker processes (the reward pool's WorkerPool), never blocking.
- turns.py: ToolTurns — engine.Turns for tool calls: parse a turn, run its calls, render the observation.
"""

from tailrl.tools import builtin as _builtin  # noqa: F401  (registers calculator and python in TOOLS)
from tailrl.tools.chat import append_reset, assistant_message, observation_ids, render_ids, tool_messages
from tailrl.tools.environment import Environment, load_environment
from tailrl.tools.executor import Session, ToolExecutor, ToolHandle
from tailrl.tools.observation import Observation
from tailrl.tools.parsers import TOOL_PARSERS, ToolCall, ToolCallError
from tailrl.tools.schema import TOOLS, Tool, load_tool, load_tools
from tailrl.tools.turns import ToolTurns

__all__ = ["TOOLS", "TOOL_PARSERS", "Environment", "Observation", "Session", "Tool", "ToolCall", "ToolCallError",
           "ToolExecutor", "ToolHandle", "ToolTurns", "append_reset", "assistant_message", "load_environment", "load_tool",
           "load_tools", "observation_ids", "render_ids", "tool_messages"]
