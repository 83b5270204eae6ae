"""torchrun's own parser and config builder on a recorded argv."""

from __future__ import annotations

import os
from unittest import mock


def torchrun_config(argv: list[str]):
    """``(LaunchConfig, entrypoint, script_args)`` for torchrun's argv (without 'torchrun').

    ``PET_*`` variables are cleared (they would supply defaults) and the environment is
    restored afterwards (``config_from_args`` sets ``OMP_NUM_THREADS``).
    """
    from torch.distributed.run import config_from_args, parse_args

    clean = {k: v for k, v in os.environ.items() if not k.startswith('PET_')}
    with mock.patch.dict(os.environ, clean, clear=True):
        args = parse_args(argv)
        if args.standalone:  # what run() does before config_from_args
            args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = 'c10d', 'localhost:0', 'x'
        if args.master_port is None:  # run() substitutes 29500 (torch 2.13)
            args.master_port = 29500
        return config_from_args(args)


def check_launch(argv: list[str], nodes: int, gpus_per_node: int):
    """Assert the processes torchrun would start; return its config and script args."""
    config, _, script_args = torchrun_config(argv)
    assert config.min_nodes == config.max_nodes == nodes
    assert config.nproc_per_node == gpus_per_node
    return config, script_args
