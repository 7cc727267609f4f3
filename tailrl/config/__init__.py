"""Run configuration: frozen dataclasses per section (sections.py, every key documented), loaded from YAML
with dotted overrides (loading.py), printed with help by `tailrl config show` (describe.py)."""

from tailrl.config.loading import (
    config_from_dict,
    dump_config,
    load_config,
    parse_override,
    set_dotted,
    to_dict,
    with_overrides,
)
from tailrl.config.sections import (
    ALGORITHM_PRESETS,
    AlgoConfig,
    Config,
    ControlConfig,
    CoupledSpecConfig,
    DataConfig,
    DecoupledSpecConfig,
    DownsampleConfig,
    EngineConfig,
    ModelConfig,
    RewardConfig,
    RolloutConfig,
    SpecConfig,
    TrainConfig,
)

__all__ = ["ALGORITHM_PRESETS", "AlgoConfig", "Config", "ControlConfig", "CoupledSpecConfig", "DataConfig",
           "DecoupledSpecConfig", "DownsampleConfig", "EngineConfig", "ModelConfig", "RewardConfig", "RolloutConfig",
           "SpecConfig", "TrainConfig", "config_from_dict", "dump_config", "load_config", "parse_override",
           "set_dotted", "to_dict", "with_overrides"]
