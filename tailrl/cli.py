"""`tailrl` command line: parse, build, run. Errors a user can cause print one line and exit 2
(`--debug` shows the traceback). The subcommands live in tailrl/commands/."""

from __future__ import annotations

import argparse
import sys

from tailrl import __version__
from tailrl.commands import FAMILIES
from tailrl.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tailrl", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="store_true")
    sub = parser.add_subparsers(dest="command")
    for family in FAMILIES:
        family.add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    # --debug may appear anywhere on the line
    debug = "--debug" in argv
    argv = [x for x in argv if x != "--debug"]
    a = parser.parse_args(argv)
    if a.version:
        print(__version__)
        return 0
    if a.command is None:
        parser.print_help()
        return 2
    if hasattr(sys.stdout, "reconfigure") and not sys.stdout.isatty():
        sys.stdout.reconfigure(line_buffering=True)  # progress lines reach a log file (nohup, a job's output) as they come
    try:
        return a.run(a)
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
