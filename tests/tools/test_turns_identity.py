"""The contract through the real tool path: ToolTurns, the executor's worker processes, a tool whose
latency is random (not seeded), observations rendered by a Qwen2.5 chat template. Multi-turn rollouts are
token-identical alone or batched, with 1 or 3 workers (other completion orders) and with speculation on.

A random model writes no `<tool_call>` blocks, so the turn's text is read by a parser that makes one
`echo` call of the turn's last characters (deterministic content) with a random delay (latency)."""

import random

import pytest

from tailrl.config import EngineConfig, SpecConfig
from tailrl.engine import Request, SamplingParams
from tailrl.speculative import build_engine
from tailrl.tools import ToolCall, ToolExecutor, ToolTurns
from tests.helpers import tiny_native
from tests.tools.test_chat import tok  # noqa: F401  (the Qwen2.5-template tokenizer fixture)

pytestmark = pytest.mark.slow  # starts worker processes

jitter = random.Random()  # unseeded on purpose: the latencies differ from run to run


def echo_parser(text: str):
    return text, [ToolCall("echo", {"text": text[-3:], "delay": jitter.uniform(0.0, 0.03)})]


def _generate(model, tok, requests, workers: int, spec: SpecConfig | str = "none"):  # noqa: F811
    """({(uid, sample): (token ids, token mask, finish reason)}, {(uid, sample): logprobs}, the trace)."""
    spec = spec if isinstance(spec, SpecConfig) else SpecConfig(method=spec)
    with ToolExecutor(tools=["tests.tools.sample_tools:echo"], workers=workers) as ex:
        turns = ToolTurns(ex, tok, max_turns=2)
        turns.parse = echo_parser
        cfg = EngineConfig(kv_cache_tokens=8192, block_size=4, max_batch_size=16, spec=spec)
        engine = build_engine(model, tok, cfg, eos_ids=[tok.eos_token_id], turns=turns)
        try:
            outs, trace = engine.generate(requests)
        finally:
            if hasattr(engine.strategy, "close"):
                engine.strategy.close()
    return ({(o.uid, o.sample_index): (o.token_ids, o.token_mask, o.finish_reason) for o in outs},
            {(o.uid, o.sample_index): o.logprobs for o in outs}, trace)


def _run(model, tok, requests, workers: int, spec: SpecConfig | str = "none"):  # noqa: F811
    return _generate(model, tok, requests, workers, spec)[0]


def test_multi_turn_rollouts_with_real_tools_are_identical_alone_batched_and_with_speculation(tok):  # noqa: F811
    model = tiny_native("llama", vocab=len(tok))[0]
    stops = tuple(tok.convert_tokens_to_ids(c) for c in "aeiou")  # a turn ends every ~20 tokens
    params = SamplingParams(temperature=1.0, max_new_tokens=60, seed=11, stop_token_ids=stops)
    requests = [Request(tok.encode(f"<|im_start|>user\nQ{u}<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False), uid=u, n=2, params=params) for u in range(3)]
    batched = _run(model, tok, requests, workers=3)
    assert sum(1 for ids, mask, _ in batched.values() if mask and 0 in mask) >= 3  # tool turns happened
    alone = {}
    for r in requests:
        alone |= _run(model, tok, [r], workers=1)
    assert alone == batched
    assert _run(model, tok, requests, workers=1, spec="ngram") == batched


def test_speculation_continues_through_tool_turns(tok, tmp_path):  # noqa: F811
    """A draft model drafts every turn, coupled and in a drafter process: rollouts and logprobs equal plain
    decoding's, with a draft that agrees (the policy: its drafts past a turn's end are accepted up to the stop,
    and the K/V they left must not stand in for the observation's) and one that often does not. In the
    drafter process the observation and the token sampled after it reach its stream as tokens gained outside
    a round (catch-up); drafts past a turn's end are discarded like any mismatch."""
    from tailrl.config import DecoupledSpecConfig
    from tailrl.model.loading import save_hf

    model = tiny_native("llama", vocab=len(tok))[0]
    save_hf(model, tmp_path / "self")
    save_hf(tiny_native("llama", vocab=len(tok), layers=1, seed=1)[0], tmp_path / "other")
    stops = tuple(tok.convert_tokens_to_ids(c) for c in "aeiou")
    params = SamplingParams(temperature=1.0, max_new_tokens=120, seed=3, stop_token_ids=stops)
    requests = [Request(tok.encode(f"<|im_start|>user\nQ{u}<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False), uid=u, n=2, params=params) for u in range(2)]
    plain, plain_lp, _ = _generate(model, tok, requests, workers=2)
    assert sum(1 for ids, mask, _ in plain.values() if mask and 0 in mask) >= 2  # tool turns happened
    for draft, mode in (("self", "decoupled"), ("other", "decoupled"), ("self", "coupled")):
        spec = SpecConfig(method=f"draft:{tmp_path / draft}", mode=mode, gate=False,
                          decoupled=DecoupledSpecConfig(window=3))
        got, lp, trace = _generate(model, tok, requests, workers=2, spec=spec)
        assert got == plain, (draft, mode)
        for k in plain_lp:  # the observations' NaN included
            assert lp[k] == pytest.approx(plain_lp[k], abs=1e-5, nan_ok=True), (draft, mode, k)
        if mode == "decoupled":  # drafts were discarded (the policy's own: only past a turn's end), never more
            # than 2w - 1 per mismatch
            assert trace.spec["spec/decoupled/wasted_tokens"] > 0
            assert trace.spec["spec/decoupled/max_waste_per_mismatch"] <= 2 * 3 - 1
