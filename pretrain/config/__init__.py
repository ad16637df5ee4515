"""The config room: the schema with every default and its description (``schema``), the value
rules (``rules``), the types (``types``), the YAML files and moved keys (``files``), the plugins
key (``plugins``) and loading (``load``). Imports only pretrain.errors below it at import time
(the registries' names are read when a config is checked).

    cfg = config.load("digits_moco.yaml", ["train.epochs=5", "out_dir=/tmp/run"])
"""

from pretrain.config.load import (
    Derived,
    derived,
    dump,
    from_dict,
    load,
    merge,
    to_dict,
    validate,
)
from pretrain.config.schema import (
    CHOICES,
    CONFIG_DIR,
    Config,
    DataConfig,
    EvalConfig,
    KappaConfig,
    LossConfig,
    MocoConfig,
    ModelConfig,
    NegativesConfig,
    TrainConfig,
    registered_choices,
)
from pretrain.errors import ConfigError

__all__ = [
    "CHOICES",
    "CONFIG_DIR",
    "Config",
    "ConfigError",
    "DataConfig",
    "Derived",
    "EvalConfig",
    "KappaConfig",
    "LossConfig",
    "MocoConfig",
    "ModelConfig",
    "NegativesConfig",
    "TrainConfig",
    "derived",
    "dump",
    "from_dict",
    "load",
    "merge",
    "registered_choices",
    "to_dict",
    "validate",
]
