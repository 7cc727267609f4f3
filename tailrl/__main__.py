"""`python -m tailrl ...` (what `torchrun -m tailrl train cfg.yaml` runs): the `tailrl` command."""

import sys

from tailrl.cli import main

sys.exit(main())
