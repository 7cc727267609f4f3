"""`tailrl` command line: parse, build, run. Errors a user can cause print one line and exit 2
(`--debug` shows the traceback)."""

from __future__ import annotations

import argparse
import sys

from tailrl.errors import UserError


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample completions for a JSONL prompts file")
    p.add_argument("--model", required=True, help="HF folder, .gguf file, or a known name (smollm2-135m-instruct)")
    p.add_argument("--prompts", required=True, help='JSONL rows {"prompt": ...} or {"messages": [...]}')
    p.add_argument("--n", type=int, default=1, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--out", help="output JSONL (default stdout)")
    p.add_argument("--timeline", help="PNG of the active batch size over time")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="engine option, e.g. --engine max_batch_size=64 --engine kv_cache_tokens=65536")


def _cmd_generate(a) -> int:
    import torch

    from tailrl.config import EngineConfig, config_from_dict, parse_override
    from tailrl.data.prompts import read_prompts
    from tailrl.engine import SamplingParams
    from tailrl.generate import print_summary, run_generate
    from tailrl.model import load

    if a.n < 1:
        raise UserError(f"--n must be >= 1, got {a.n}")
    if a.temperature < 0 or not 0 < a.top_p <= 1 or a.max_new_tokens < 1:
        raise UserError("need --temperature >= 0, 0 < --top-p <= 1, --max-new-tokens >= 1")
    engine_cfg = config_from_dict(dict(parse_override(kv) for kv in a.engine), EngineConfig)
    torch.manual_seed(a.seed)
    model, tok = load(a.model, dtype=a.dtype, device=a.device)
    rows = read_prompts(a.prompts, tok)
    params = SamplingParams(temperature=a.temperature, top_p=a.top_p, top_k=a.top_k, max_new_tokens=a.max_new_tokens,
                            seed=a.seed, stop=tuple(a.stop), ignore_eos=a.ignore_eos)
    result = run_generate(model, tok, rows, params, a.n, engine_cfg, a.out, progress=sys.stderr.isatty())
    print_summary(result)
    if a.timeline:
        from tailrl.engine.timeline import plot_timeline

        plot_timeline(result.trace, a.timeline, title=f"{a.model}: {len(rows)} prompts x {a.n}")
        print(f"timeline: {a.timeline}", file=sys.stderr)
    return 0


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="the main job on the embedded default (no downloads)")
    p.add_argument("--out-dir", default=None, help="run directory (default runs/demo-<time>)")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=96)


def _cmd_demo(a) -> int:
    from tailrl.demo import run_demo

    return run_demo(a.model, a.out_dir, a.prompts, a.n, a.max_new_tokens)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tailrl", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="store_true")
    sub = parser.add_subparsers(dest="command")
    _add_generate(sub)
    _add_demo(sub)
    argv = sys.argv[1:] if argv is None else argv
    # --debug may appear anywhere on the line
    debug = "--debug" in argv
    argv = [x for x in argv if x != "--debug"]
    a = parser.parse_args(argv)
    if a.version:
        from tailrl import __version__

        print(__version__)
        return 0
    commands = {"generate": _cmd_generate, "demo": _cmd_demo}
    if a.command is None:
        parser.print_help()
        return 2
    try:
        return commands[a.command](a)
    except UserError as e:
        if debug:
            raise
        print(f"tailrl {a.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
