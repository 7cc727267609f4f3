"""`tailrl simulate CONFIG [overrides]`: run every variant of a simulator config and write the report."""

from __future__ import annotations

from pathlib import Path

from tailrl.config import load_config
from tailrl.errors import UserError
from tailrl.sim.config import SimConfig
from tailrl.sim.report import write_report
from tailrl.sim.run import simulate, variants

CALIBRATION_DIR = Path(__file__).parent / "calibration"


def resolve_config(name: str) -> Path:
    """A YAML path, or the name of a bundled calibration config (tailrl/sim/calibration/NAME.yaml)."""
    p = Path(name)
    if p.is_file():
        return p
    bundled = CALIBRATION_DIR / f"{name.removesuffix('.yaml')}.yaml"
    if bundled.is_file():
        return bundled
    names = ", ".join(sorted(f.stem for f in CALIBRATION_DIR.glob("*.yaml")))
    raise UserError(f"simulator config not found: {name} (a YAML file, or one of the bundled: {names})")


def run_simulate(config: str | None, overrides: list[str], out: str | Path) -> tuple[str, list]:
    path = resolve_config(config) if config else None
    cfg = load_config(path, overrides, cls=SimConfig)
    results = [simulate(v, name) for name, v in variants(cfg)]
    title = f"{path.stem if path else 'simulation'}: {cfg.model} on {cfg.cluster.num_gpus}x {cfg.cluster.gpu}"
    md = write_report(Path(out), results, title)
    return md, results
