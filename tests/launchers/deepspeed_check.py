"""DeepSpeed's own config class, world size = the plan's DP."""

from __future__ import annotations

import copy
from unittest import mock


def deepspeed_config(config: dict | str, dp: int):
    """``DeepSpeedConfig`` built from a dict (or a file path) as DeepSpeed would at DP ``dp``.

    Without a process group DeepSpeed swallows the error and uses world size 1, so
    ``get_world_size`` is patched to the data-parallel size (what an ``mpu`` would give).
    """
    from deepspeed.runtime import config as ds_config

    source = copy.deepcopy(config) if isinstance(config, dict) else config
    with mock.patch.object(ds_config.dist, 'get_rank', return_value=0), \
            mock.patch.object(ds_config.dist, 'get_world_size', return_value=dp):
        return ds_config.DeepSpeedConfig(source)
