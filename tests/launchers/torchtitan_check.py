"""Importing torchtitan's config on a CPU box without triton.

``import torchtitan`` reaches ``torchtitan/models/moe/kernels.py``, which needs triton
(no CPU wheel). Only the config and ``ParallelDims`` are exercised here, so without
triton that one module is replaced by a stub whose kernel raises if ever called.
"""

from __future__ import annotations

import importlib.util
import sys
import types

KERNELS = 'torchtitan.models.moe.kernels'


def stub_triton_kernels() -> None:
    """Install the stub when triton is missing (idempotent)."""
    if importlib.util.find_spec('triton') is not None or KERNELS in sys.modules:
        return
    stub = types.ModuleType(KERNELS)

    def generate_permute_indices(*args, **kwargs):
        raise RuntimeError('triton kernel stub: not available in the launcher tests')

    stub.generate_permute_indices = generate_permute_indices
    sys.modules[KERNELS] = stub


def parse_job_config(path):
    """The job config torchtitan's own ConfigManager builds from the TOML at ``path``."""
    stub_triton_kernels()
    from torchtitan.config import ConfigManager

    return ConfigManager().parse_args(['--job.config_file', str(path)])
