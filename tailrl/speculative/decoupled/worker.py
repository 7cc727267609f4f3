"""The drafter process of decoupled speculation: a draft model on its own cores (or device), drafting
ahead of the verifier (SpecActor §4.1).

Lockstep rounds over one pipe. The verifier sends a round message (requests added, tokens it
committed, per-request window changes, requests dropped); the drafter applies it, drafts each
request's share for the round (Stream.to_draft: up to w tokens, at most 2w - 1 ahead of the
verified token) as keyed samples of the draft model — the same keys and sampler as the target — and
replies with the drafted chunks while the verifier is running its forward for the same round.

    verifier: send(M_r) -> verify round r -> recv(R_r) -> merge R_r -> commit ...
    drafter:  recv(M_r) -> reconcile commits -> draft R_r -> send(R_r) -> recv(M_r+1) ...

Messages: ("round", ops) with ops
    ("add", seq_id, request, sample_index, tokens, num_prompt, limit, w, mode)
    ("commit", seq_id, tokens)          tokens verified after the stream's start
    ("cfg", seq_id, w, mode)            Alg. 2's per-request reconfiguration
    ("drop", seq_id)
  and ("reset",) (end of a rollout: free every cache), ("stop",).
Reply: ("drafts", [(seq_id, epoch, start, tokens)], seconds drafting, draft steps, requests drafted).
"""

from __future__ import annotations

import json
import os
import sys
import time
from multiprocessing.connection import Client

from tailrl.rewards.procpool_child import (  # the pool workers' child rules
    die_with_parent,
    ignore_stop_signals,
)


def serve(conn, model_path: str, dtype: str, device: str, threads: int, cores: list[int] | None,
          kv_tokens: int, block_size: int, sampler: str) -> None:
    """The drafter loop on an open connection to the verifier."""
    if cores:
        os.sched_setaffinity(0, cores)
    # lazy (subprocess start-up): torch starts its threads at import, after the pinning above
    import torch

    from tailrl.engine.sequence import Sequence
    from tailrl.speculative.decoupled.stream import Stream, reconcile
    from tailrl.speculative.drafters.draft_model import DraftModelDrafter
    from tailrl.speculative.drafters.vocab_head import load_draft

    torch.set_num_threads(max(1, threads))

    model = load_draft(model_path, dtype=getattr(torch, dtype), device=device)
    drafter = DraftModelDrafter(model, sampler, kv_tokens, block_size)
    live: dict[int, tuple[Sequence, Stream, int]] = {}  # seq id -> (mirror: verified + drafted, stream, limit)
    conn.send(("ready", model.args.vocab_size))
    with torch.inference_mode():
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                break
            if msg[0] == "reset":
                drafter.end_rollout()
                live.clear()
                continue
            for op in msg[1]:
                if op[0] == "add":
                    _, sid, req, k, toks, n_prompt, limit, w, mode = op
                    live[sid] = (Sequence(sid, req, k, limit, list(toks), n_prompt), Stream(len(toks), w, mode), limit)
                elif op[0] == "commit":
                    seq, st, _ = live[op[1]]
                    start = st.start
                    reconcile(st, op[2])
                    del seq.tokens[start:]
                    seq.tokens += op[2] + st.tokens
                elif op[0] == "cfg":
                    live[op[1]][1].w, live[op[1]][1].mode = op[2], op[3]
                elif op[0] == "drop":
                    seq, _, _ = live.pop(op[1])
                    drafter.release(seq)
            t0 = time.perf_counter()
            want = [(seq, st, st.to_draft(limit)) for seq, st, limit in live.values()]
            want = [x for x in want if x[2] > 0]
            chunks = []
            if want:
                drafts = drafter.propose([x[0] for x in want], [x[2] for x in want])
                for (seq, st, _), d in zip(want, drafts):
                    if d:
                        chunks.append((seq.seq_id, st.epoch, st.end, d))
                        st.tokens += d
                        seq.tokens += d
            conn.send(("drafts", chunks, time.perf_counter() - t0, max((x[2] for x in want), default=0), len(want)))


def main() -> None:
    """`python -m tailrl.speculative.decoupled.worker ARGS_JSON` (started by decoupled/speculator.py)."""
    a = json.loads(sys.argv[1])
    die_with_parent(a.pop("parent"))
    ignore_stop_signals()  # a SLURM-wide SIGTERM: the verifier's process decides when the drafts stop
    conn = Client(a.pop("address"), family="AF_UNIX", authkey=bytes.fromhex(a.pop("authkey")))
    try:
        serve(conn, **a)
    except EOFError:  # the verifier went away
        pass


if __name__ == "__main__":
    main()
