"""The `tailrl` subcommands, one module per family. Each module's `add(subparsers)` registers its
parsers and binds every (sub)command to its handler with `set_defaults(run=...)`; a handler takes the
parsed arguments, returns an exit code and raises UserError for mistakes a user can fix."""

from tailrl.commands import bench, config, export, generate, profile, simulate, training

FAMILIES = (generate, training, export, bench, profile, simulate, config)
