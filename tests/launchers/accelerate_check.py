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
