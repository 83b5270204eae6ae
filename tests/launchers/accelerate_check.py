"""accelerate's config loader, launch parser and env builders."""

from __future__ import annotations

import os
from unittest import mock


def accelerate_launch(argv: list[str], hf_home: str):
    """What ``accelerate launch`` would hand torchrun: ``(torchrun_args, env, config)``.

    ``argv`` is the launch argv without ``accelerate launch``. ``HF_HOME`` points at an
    empty folder so no user default config is read.
    """
    import torch.distributed.run as distrib_run
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import (
        _filter_args,
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
    )

    with mock.patch.dict(os.environ, {'HF_HOME': hf_home}):
        args = launch_command_parser().parse_args(argv)
        config = load_config_from_file(args.config_file)
        args, defaults, mp_from_config_flag = _validate_launch_command(args)
        if args.use_deepspeed:  # as launch_command() does
            fields = list(defaults.deepspeed_config.keys()) if defaults else []
            if mp_from_config_flag:
                fields.append('mixed_precision')
            args.deepspeed_fields_from_accelerate_config = ','.join(fields)
            _, env = prepare_deepspeed_cmd_env(args)
        else:
            env = prepare_multi_gpu_env(args)
        torchrun_args = _filter_args(
            args, distrib_run.get_args_parser(),
            ['--training_script', args.training_script,
             '--training_script_args', args.training_script_args])
    return torchrun_args, env, config


def parallelism_config(env: dict[str, str], world_size: int, fsdp_version: int = 2):
    """The ``ParallelismConfig`` accelerate's ``Accelerator`` builds from ``env`` (it reads
    the ``PARALLELISM_CONFIG_*`` variables when ``ACCELERATE_USE_PARALLELISM_CONFIG`` is
    true and no config is passed: src/accelerate/accelerator.py), checked against a
    ``world_size``-process FSDP run as ``Accelerator.__init__`` checks it
    (``_validate_accelerator``: the sizes multiply to the world, FSDP2 has a shard
    dimension)."""
    from types import SimpleNamespace

    from accelerate import ParallelismConfig
    from accelerate.utils import DistributedType

    assert env['ACCELERATE_USE_PARALLELISM_CONFIG'] == 'true'
    with mock.patch.dict(os.environ, env):
        config = ParallelismConfig()
    accelerator = SimpleNamespace(multi_device=True, num_processes=world_size,
                                  is_fsdp2=fsdp_version == 2, is_main_process=True,
                                  distributed_type=DistributedType.FSDP)
    config._validate_accelerator(accelerator)
    return config
