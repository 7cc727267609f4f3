"""Generation over a TP x DP layout under `torchrun` (one process per rank, launched by torch):

    torchrun --nproc-per-node 2 -m tailrl.parallel.torchrun --model M --prompts p.jsonl --samples 8 \\
        --tp 1 --switch tp2@40:migrate --out completions.jsonl

Every rank runs the same rollout as `tailrl generate --tp/--dp` (which spawns its own ranks); rank 0
writes the completions. The world size comes from torchrun: DP = world / --tp."""

from __future__ import annotations

import argparse
import json
import sys

import torch.distributed as dist

from tailrl.config import EngineConfig
from tailrl.data.prompts import read_prompts
from tailrl.engine import Request, SamplingParams
from tailrl.errors import UserError
from tailrl.model import load
from tailrl.outputs.completions import write_rollouts
from tailrl.parallel.dist import init_from_env
from tailrl.parallel.generate import SwitchParams, _rank_main, check_layout
from tailrl.speculative import eos_ids_of


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tailrl.parallel.torchrun", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--samples", type=int, default=1, help="samples per prompt (torchrun would take --n as its own option)")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--switch", default="off")
    p.add_argument("--switch-kv", default="auto", choices=["auto", "migrate", "recompute"])
    p.add_argument("--tp-profile")
    p.add_argument("--out")
    a = p.parse_args(argv)

    rank, world = init_from_env()
    try:
        model, tok = load(a.model)
        switch = SwitchParams.parse(a.switch, a.switch_kv)
        try:
            profile = json.loads(open(a.tp_profile).read()) if a.tp_profile else None
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(f"cannot read the latency profile {a.tp_profile}: {e}") from None
        check_layout(model.args, a.tp, world // a.tp if world % a.tp == 0 else 0, switch, profile)
        rows = read_prompts(a.prompts, tok)
        params = SamplingParams(temperature=a.temperature, max_new_tokens=a.max_new_tokens, seed=a.seed,
                                ignore_eos=a.ignore_eos)
        requests = [Request(r.token_ids, uid=r.index, n=a.samples, params=params, error=r.error) for r in rows]
        res = _rank_main(rank, world, a.model, requests, EngineConfig(), a.tp, switch, profile, 8,
                         tuple(eos_ids_of(model, tok)), a.max_new_tokens)
    except UserError as e:
        print(f"rank {rank}: error: {e}", file=sys.stderr)
        return 2
    finally:

        dist.destroy_process_group()
    if rank == 0:
        write_rollouts(res.rollouts, tok, params, a.out)
        print(f"rollout {res.rollout_s:.2f}s over {world} ranks; layouts {' -> '.join(res.layouts)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
