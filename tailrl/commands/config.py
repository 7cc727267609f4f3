"""`tailrl config show [SECTION] [KEY=VALUE ...] [--config FILE]`: every configuration key with its type, value
and help text; overrides (or a YAML file) show a run's values, and `algo.name=dapo` fills in the preset."""

from __future__ import annotations

from tailrl.errors import UserError


def add(sub) -> None:
    p = sub.add_parser("config", help="show the configuration keys, their defaults and help")
    q = p.add_subparsers(dest="config_command", required=True)
    s = q.add_parser("show", help="print every key of a section (all sections by default) with type, value and help")
    s.set_defaults(run=show)
    s.add_argument("args", nargs="*", metavar="SECTION|KEY=VALUE",
                   help="a section (rollout, engine.spec, ...) and/or dotted overrides, e.g. algo.name=dapo")
    s.add_argument("--config", help="a YAML config whose values are shown")


def show(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from dataclasses import replace

    from tailrl.config import load_config
    from tailrl.config.describe import describe
    from tailrl.train.recipe import resolve_algo

    sections = [x for x in a.args if "=" not in x]
    if len(sections) > 1:
        raise UserError(f"name one section at most, got {', '.join(sections)}")
    cfg = load_config(a.config, [x for x in a.args if "=" in x])
    cfg = replace(cfg, algo=resolve_algo(cfg.algo, cfg.rollout.max_new_tokens))  # the preset's values filled in
    print(describe(cfg, sections[0] if sections else ""))
    return 0
