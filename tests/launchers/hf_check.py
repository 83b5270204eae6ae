"""HfArgumentParser over TrainingArguments, and the DS "fill-in"."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock


def training_arguments(argv: list[str] | dict):
    """``TrainingArguments`` parsed from flags (or a dict) on a CPU box (bf16 allowed)."""
    from transformers import HfArgumentParser, TrainingArguments

    parser = HfArgumentParser(TrainingArguments)
    with mock.patch('transformers.training_args.is_torch_bf16_gpu_available', return_value=True):
        if isinstance(argv, dict):
            (args,) = parser.parse_dict(argv, allow_extra_keys=False)
        else:
            (args,) = parser.parse_args_into_dataclasses(args=argv,
                                                         return_remaining_strings=False)
    return args


def resolved_deepspeed_config(args, dp: int, hidden_size: int, steps: int) -> dict:
    """The DeepSpeed config the Trainer would hand to DeepSpeed at world size ``dp``.

    Runs ``trainer_config_process`` and ``trainer_config_finalize``, which fill "auto"
    values and raise on any mismatch with the TrainingArguments.
    """
    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    config = HfTrainerDeepSpeedConfig(args.deepspeed)
    with mock.patch.object(TrainingArguments, 'world_size', new_callable=mock.PropertyMock,
                           return_value=dp):
        config.trainer_config_process(args)
        model = SimpleNamespace(config=SimpleNamespace(hidden_size=hidden_size,
                                                       hidden_sizes=None))
        config.trainer_config_finalize(args, model, steps)
    return config.config
