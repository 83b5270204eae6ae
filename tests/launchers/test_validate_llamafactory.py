"""LLaMA-Factory exports, parsed by its own HfArgumentParser over _TRAIN_ARGS.

llamafactory 0.9.5 pins transformers <= 5.6 and accelerate <= 1.11, below the versions
the other validators use, and pulls gradio, torchvision and torchaudio; the Makefile
installs it with ``--no-deps`` (plus omegaconf and peft) and this test parses with the
version check disabled. Without it the test is skipped.
"""

from __future__ import annotations

import os
from unittest import mock

import pytest

from planner.export import ExportOptions, export_plan
from planner.memory.training import LoraSpec
from tests.export_helpers import hsdp_plan, make_plan, recorded_env, run_script

os.environ.setdefault('DISABLE_VERSION_CHECK', '1')
pytest.importorskip('llamafactory')
yaml = pytest.importorskip('yaml')
pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning',
                                        'ignore::FutureWarning', 'ignore::UserWarning')


def parse(text: str):
    from llamafactory.hparams.parser import _TRAIN_ARGS
    from transformers import HfArgumentParser

    with mock.patch('transformers.training_args.is_torch_bf16_gpu_available',
                    return_value=True):
        return HfArgumentParser(_TRAIN_ARGS).parse_dict(yaml.safe_load(text),
                                                        allow_extra_keys=False)


@pytest.mark.parametrize(('zero', 'sharding'), [(0, 'deepspeed'), (3, 'deepspeed'),
                                                (2, 'fsdp')])
def test_yaml_parses_with_the_plan_numbers(zero, sharding):
    # the hf stack shards with DeepSpeed under LoRA only (FSDP2 otherwise)
    lora = LoraSpec(8, ('q', 'v')) if sharding == 'deepspeed' and zero else None
    plan = make_plan(nodes=2, zero=zero, recompute='full', global_batch=256, framework='hf',
                     lora=lora)
    text = export_plan(plan, 'llamafactory', ExportOptions(sharding=sharding)).text
    model, _, training, finetuning, _ = parse(text)
    c = plan.candidate
    assert model.model_name_or_path == 'meta-llama/Llama-3.2-1B'
    assert training.per_device_train_batch_size == c.micro_batch
    assert training.gradient_accumulation_steps == c.grad_accum
    assert training.warmup_steps == plan.guidance.warmup_steps
    assert training.max_steps == plan.steps
    assert training.bf16
    assert finetuning.stage == 'pt'
    assert finetuning.finetuning_type == ('lora' if lora else 'full')
    if zero and sharding == 'deepspeed':
        assert training.deepspeed['train_batch_size'] == 256
    assert 'NNODES=2' in text
    assert 'NPROC_PER_NODE=8' in text


def test_unknown_key_would_be_caught():
    with pytest.raises(ValueError, match='not used by the HfArgumentParser'):
        parse('model_name_or_path: x\nper_device_train_batch_sz: 2\n')


def verify(parsed) -> None:
    """LLaMA-Factory's own checks of the model and fine-tuning arguments (get_train_args
    runs them after parsing; the rest of it needs the model and data sets)."""
    from llamafactory.hparams.parser import _verify_model_args

    model, data, _, finetuning, _ = parsed
    _verify_model_args(model, data, finetuning)


@pytest.mark.parametrize(('lora', 'zero', 'target'), [
    (LoraSpec(16), 0, ['q_proj', 'k_proj', 'v_proj', 'o_proj']),
    (LoraSpec(64, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4), 3, ['all']),
    (LoraSpec(8, ('q', 'v', 'down'), 4), 2, ['q_proj', 'v_proj', 'down_proj']),
    (LoraSpec(8, ('q', 'v'), 8), 1, ['q_proj', 'v_proj']),
])
def test_lora_yaml_parses_and_passes_the_model_checks(lora, zero, target):
    plan = make_plan(nodes=2, zero=zero, recompute='full', global_batch=256, lora=lora)
    parsed = parse(export_plan(plan, 'llamafactory').text)
    verify(parsed)
    model, _, training, finetuning, _ = parsed
    assert finetuning.finetuning_type == 'lora'
    assert finetuning.lora_rank == lora.rank
    assert finetuning.lora_target == target
    assert finetuning.lora_dropout == 0.0
    if lora.quantized:
        assert model.quantization_bit == lora.base_bits
        assert model.quantization_type == 'nf4'
        assert model.double_quantization
    else:
        assert model.quantization_bit is None
    assert training.per_device_train_batch_size == plan.candidate.micro_batch
    assert training.gradient_accumulation_steps == plan.candidate.grad_accum


def test_quantization_without_lora_would_be_caught():
    plan = make_plan(nodes=1, zero=0, global_batch=64, framework='hf')
    text = export_plan(plan, 'llamafactory').text + 'quantization_bit: 4\n'
    with pytest.raises(ValueError, match='only compatible with the LoRA'):
        verify(parse(text))


def test_hsdp_plan_launch_exports_the_parallelism_config(tmp_path):
    """LLaMA-Factory runs the HF Trainer under torchrun with its own environment
    (llamafactory/launcher.py copies os.environ): the launch line carries accelerate's
    ParallelismConfig variables, and the YAML FSDP2."""
    from tests.launchers.accelerate_check import parallelism_config

    plan = hsdp_plan()
    c = plan.candidate
    text = export_plan(plan, 'llamafactory').text
    _, _, training, _, _ = parse(text)
    assert training.fsdp_config['version'] == 2
    launch = next(line for line in text.splitlines() if line.startswith('# Launch: '))
    run_script(launch.removeprefix('# Launch: '), tmp_path, {'MASTER_ADDR': 'h', 'NODE_RANK': '0'})
    env = recorded_env(tmp_path, 'llamafactory-cli')
    parallel = parallelism_config(env, world_size=c.gpus)
    assert (parallel.dp_replicate_size, parallel.dp_shard_size) == (
        c.dp_replicate, c.dp // c.dp_replicate)


def test_chunked_loss_plan_enables_liger_in_llamafactory():
    """A --loss chunked plan: LLaMA-Factory's own enable_liger_kernel (its model argument),
    not the Trainer's use_liger_kernel, which LLaMA-Factory never reads."""
    plan = make_plan(nodes=2, zero=2, recompute='full', global_batch=256, framework='hf',
                     loss='chunked')
    parsed = parse(export_plan(plan, 'llamafactory').text)
    verify(parsed)
    model, _, training, finetuning, _ = parsed
    assert model.enable_liger_kernel is True
    assert training.use_liger_kernel is False
    assert finetuning.stage == 'pt'  # LLaMA-Factory keeps Liger's fused linear CE for pt
    plain = parse(export_plan(make_plan(nodes=2, zero=2, global_batch=256, framework='hf'),
                              'llamafactory').text)
    assert plain[0].enable_liger_kernel is False


def test_llamafactory_patches_every_model_type_batchfit_plans_chunked(monkeypatch):
    """LLaMA-Factory's apply_liger_kernel (model/model_utils/liger_kernel.py) calls a Liger
    patch, with the fused linear cross-entropy left on, for every model type batchfit
    allows --loss chunked on, and none for a type it refuses."""
    import importlib.util
    import sys
    import types
    from pathlib import Path
    from types import SimpleNamespace

    import llamafactory

    from planner.stacks.catalog import LIGER_MODEL_TYPES

    # the module alone: llamafactory.model's __init__ imports its loader, which needs trl
    base = Path(llamafactory.__file__).parent
    for name, folder in (('llamafactory.model', 'model'),
                         ('llamafactory.model.model_utils', 'model/model_utils')):
        package = types.ModuleType(name)
        package.__path__ = [str(base / folder)]
        monkeypatch.setitem(sys.modules, name, package)
    spec = importlib.util.spec_from_file_location(
        'llamafactory.model.model_utils.liger_kernel', base / 'model/model_utils/liger_kernel.py')
    lf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lf)

    calls = []

    def patch(name):
        def apply(rope=True, cross_entropy=False, fused_linear_cross_entropy=True,
                  rms_norm=True, swiglu=True, model=None, **kwargs):
            calls.append((name, fused_linear_cross_entropy and not cross_entropy))
        return apply

    fake = types.ModuleType('liger_kernel.transformers')
    fake.__getattr__ = lambda name: patch(name)  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, 'liger_kernel', types.ModuleType('liger_kernel'))
    monkeypatch.setitem(sys.modules, 'liger_kernel.transformers', fake)
    args = SimpleNamespace(enable_liger_kernel=True)
    for kind in sorted(LIGER_MODEL_TYPES):
        calls.clear()
        lf.apply_liger_kernel(SimpleNamespace(model_type=kind), args, is_trainable=True,
                              require_logits=False)
        assert calls == [(f'apply_liger_kernel_to_{kind}', True)], kind
    for kind in ('gpt2', 'gpt_neox', 'qwen2_moe'):
        calls.clear()
        lf.apply_liger_kernel(SimpleNamespace(model_type=kind), args, is_trainable=True,
                              require_logits=False)
        assert calls == [], kind
