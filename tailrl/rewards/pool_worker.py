"""One reward worker process of `RewardPool` (pool.py): `python -m tailrl.rewards.pool_worker FD ARGS_JSON`.

Place in the flow: RewardPool's `WorkerPool` (procpool.py) starts it as a fresh interpreter; `serve`
(procpool_child.py) runs `load`, which imports the modules that register reward names, loads the reward
functions itself (so "file.py:function" references load here) and runs their `prepare()` hooks. Then
each message `(f, prompt, completion, row)` is answered with one `Scored`; the ready message carries the
functions' names. Everything a call can raise is caught here and sent back as a failure.
"""

from __future__ import annotations

import importlib

from tailrl.rewards.procpool_child import serve
from tailrl.rewards.scoring import Scored, settle
from tailrl.rewards.settings import Loaded, load_functions
from tailrl.rewards.timeout import Outcome


def load(args: dict):
    """(names, answer) for the functions in `args` (see procpool_child.serve)."""
    for module in args["imports"]:  # modules whose import registers a reward name the trainer registered
        importlib.import_module(module)
    loaded = load_functions(args["functions"])

    def answer(call: tuple) -> Scored:
        f, prompt, completion, row = call
        return settle(_call(loaded[f], prompt, completion, row))

    return [f.name for f in loaded], answer


def _call(f: Loaded, prompt: str, completion: str, row: dict) -> Outcome:
    try:
        return Outcome(value=f.fn(prompt, completion, **f.keep(row)))
    except BaseException as e:  # SystemExit too: the call failed, this worker goes on
        return Outcome(error=e)


if __name__ == "__main__":
    serve(load)
