"""Megatron exports, checked with megatron-core (megatron/training/arguments.py).

megatron-core ships the microbatch calculator and ``TransformerConfig`` (whose
``__post_init__`` holds Megatron's own checks of heads, groups, pipeline and recompute
settings). ``megatron/training/arguments.py`` (the full ``validate_args``) is not on
PyPI, so the flags are read back here with a parser of the exported flag names (dashed
only, ``allow_abbrev=False``, as Megatron's), and the numbers go through megatron-core.
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings

import pytest

from planner.export import export_plan
from tests.export_helpers import (
    check_stage_layers,
    make_plan,
    recorded_argv,
    recorded_env,
    run_script,
)
from tests.launchers.torchrun_check import check_launch

pytest.importorskip('megatron.core.num_microbatches_calculator')

INT_FLAGS = ('--tensor-model-parallel-size', '--pipeline-model-parallel-size',
             '--context-parallel-size', '--micro-batch-size', '--global-batch-size',
             '--num-layers-per-virtual-pipeline-stage', '--num-layers', '--hidden-size',
             '--ffn-hidden-size', '--num-attention-heads', '--num-query-groups',
             '--kv-channels', '--seq-length', '--max-position-embeddings', '--train-iters',
             '--lr-warmup-iters', '--recompute-num-layers', '--num-experts',
             '--moe-router-topk', '--moe-ffn-hidden-size', '--rotary-base',
             '--expert-model-parallel-size', '--expert-tensor-parallel-size')
SWITCHES = ('--sequence-parallel', '--use-distributed-optimizer', '--recompute-activations',
            '--group-query-attention', '--swiglu', '--untie-embeddings-and-output-weights',
            '--disable-bias-linear', '--add-qkv-bias', '--qk-layernorm', '--bf16', '--fp16',
            '--use-rope-scaling', '--overlap-grad-reduce', '--overlap-param-gather',
            '--tp-comm-overlap', '--grad-reduce-in-bf16')


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name in INT_FLAGS:
        parser.add_argument(name, type=int)
    for name in SWITCHES:
        parser.add_argument(name, action='store_true')
    for name in ('--lr', '--min-lr', '--attention-dropout', '--hidden-dropout',
                 '--rope-scaling-factor', '--rotary-percent', '--norm-epsilon'):
        parser.add_argument(name, type=float)
    parser.add_argument('--position-embedding-type', choices=('rope', 'learned_absolute',
                                                              'none'))
    parser.add_argument('--normalization', choices=('LayerNorm', 'RMSNorm'))
    parser.add_argument('--lr-decay-style', choices=('constant', 'linear', 'cosine',
                                                     'inverse-square-root', 'WSD'))
    parser.add_argument('--recompute-granularity', choices=('full', 'selective'))
    parser.add_argument('--recompute-method', choices=('uniform', 'block'))
    parser.add_argument('--fp8-format', choices=('e4m3', 'hybrid'))
    parser.add_argument('--pipeline-model-parallel-layout')
    return parser.parse_args(argv)


def transformer_config(a: argparse.Namespace, world: int):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if a.bf16 else torch.float16 if a.fp16 else torch.float32
    vpp = None
    if a.num_layers_per_virtual_pipeline_stage:
        vpp = a.num_layers // (a.pipeline_model_parallel_size
                               * a.num_layers_per_virtual_pipeline_stage)
    granularity = 'selective' if a.recompute_activations else a.recompute_granularity
    with warnings.catch_warnings():  # megatron-core's advice about its own defaults
        warnings.simplefilter('ignore', UserWarning)
        return TransformerConfig(
            num_layers=a.num_layers, hidden_size=a.hidden_size,
            num_attention_heads=a.num_attention_heads, ffn_hidden_size=a.ffn_hidden_size,
            num_query_groups=a.num_query_groups if a.group_query_attention else None,
            kv_channels=a.kv_channels, tensor_model_parallel_size=a.tensor_model_parallel_size,
            pipeline_model_parallel_size=a.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=vpp,
            context_parallel_size=a.context_parallel_size, sequence_parallel=a.sequence_parallel,
            recompute_granularity=granularity, recompute_method=a.recompute_method,
            recompute_num_layers=a.recompute_num_layers, bf16=a.bf16, fp16=a.fp16,
            params_dtype=dtype, pipeline_dtype=dtype, gated_linear_unit=a.swiglu,
            add_bias_linear=not a.disable_bias_linear, qk_layernorm=a.qk_layernorm,
            normalization=a.normalization, attention_dropout=a.attention_dropout,
            hidden_dropout=a.hidden_dropout,
            pipeline_model_parallel_layout=a.pipeline_model_parallel_layout,
            tp_comm_overlap=a.tp_comm_overlap,
            **({} if a.norm_epsilon is None else {'layernorm_epsilon': a.norm_epsilon}))


@pytest.mark.parametrize(('tp', 'pp', 'vpp', 'cp', 'zero', 'recompute'), [
    (2, 2, 1, 1, 1, 'selective'), (4, 2, 2, 1, 0, 'full'), (1, 1, 1, 1, 1, 'none'),
    (2, 1, 1, 2, 1, 'none'), (1, 4, 4, 1, 0, 'selective'), (2, 2, 1, 1, 1, 'half'),
    (1, 4, 2, 1, 0, 'half')])
def test_megatron_core_accepts_numbers_and_shape(tmp_path, tp, pp, vpp, cp, zero, recompute):
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    plan = make_plan(model='llama-3.1-8b', nodes=4, tp=tp, pp=pp, vpp=vpp, cp=cp, zero=zero,
                     recompute=recompute, micro_batch=1, global_batch=256, seq_len=4096,
                     framework='megatron', precision='bf16-mixed')
    run_script(export_plan(plan, 'megatron').text, tmp_path,
               {'NODE_RANK': '2', 'MASTER_ADDR': 'h0'})
    argv = recorded_argv(tmp_path, 'torchrun')
    check_launch(argv, 4, 8)
    a = parse(argv[argv.index('pretrain_gpt.py') + 1:])
    world = 32
    model_parallel = a.tensor_model_parallel_size * a.pipeline_model_parallel_size * (
        a.context_parallel_size)
    assert world % model_parallel == 0  # validate_args: world divisible by tp·pp·cp
    dp = world // model_parallel
    calculator = ConstantNumMicroBatchesCalculator(a.global_batch_size, a.micro_batch_size, dp,
                                                   False, 0)
    c = plan.candidate
    assert calculator.get() == c.grad_accum
    assert calculator.get_current_global_batch_size() == 256
    config = transformer_config(a, world)
    assert config.tensor_model_parallel_size == tp
    assert (config.virtual_pipeline_model_parallel_size or 1) == vpp
    env = recorded_env(tmp_path, 'torchrun')
    assert (env.get('CUDA_DEVICE_MAX_CONNECTIONS') == '1') == (tp > 1 or cp > 1)
    assert a.use_distributed_optimizer == (zero == 1)
    assert a.lr_warmup_iters == plan.guidance.warmup_steps
    assert a.train_iters == plan.steps
    if recompute == 'half':
        # block: the first N layers of each model chunk recomputed, the others keep their
        # activations: at least half of each chunk, what the estimate kept whole
        assert (config.recompute_granularity, config.recompute_method) == ('full', 'block')
        chunk = plan.model.spec.num_layers // (pp * vpp)
        assert config.recompute_num_layers == chunk // 2
        assert chunk - config.recompute_num_layers >= chunk / 2


def test_calculator_rejects_a_wrong_dp():
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    plan = make_plan(model='llama-3.1-8b', nodes=4, tp=2, pp=2, zero=1, micro_batch=2,
                     global_batch=256, seq_len=4096, framework='megatron',
                     precision='bf16-mixed')
    c = plan.candidate
    with pytest.raises(AssertionError, match='not divisible'):
        ConstantNumMicroBatchesCalculator(c.global_batch, c.micro_batch, 6, False, 0)


@pytest.mark.parametrize(('model', 'base', 'scaling', 'percent', 'eps'), [
    ('llama-3.1-8b', 500_000, 8.0, None, 1e-5),  # config.json: rope_theta, rope_scaling
    ('llama-3.2-1b', 500_000, 32.0, None, 1e-5),
    ('qwen2.5-7b', 1_000_000, None, None, 1e-6),
    ('pythia-1b', 10_000, None, 0.25, 1e-5),  # rotary_pct 0.25
])
def test_megatron_builds_the_same_rope_and_norms(tmp_path, model, base, scaling, percent, eps):
    """Without --rotary-base Megatron would rotate Llama-3.1 at 10000, not 500000."""
    plan = make_plan(model=model, nodes=1, tp=1, pp=1, zero=1, micro_batch=1,
                     global_batch=64, seq_len=2048, framework='megatron',
                     precision='bf16-mixed')
    text = export_plan(plan, 'megatron').text
    run_script(text, tmp_path, {})
    argv = recorded_argv(tmp_path, 'torchrun')
    a = parse(argv[argv.index('pretrain_gpt.py') + 1:])
    assert a.rotary_base == base
    assert a.use_rope_scaling == (scaling is not None)
    assert a.rope_scaling_factor == scaling
    assert a.rotary_percent == percent
    assert a.norm_epsilon == eps
    assert transformer_config(a, 8).layernorm_epsilon == eps


@pytest.mark.parametrize('zero', [0, 1])
def test_overlap_switches_are_what_megatron_core_accepts(tmp_path, zero):
    """A plan timed with --overlap-grad-reduce exports it, and the parameter-gather overlap
    only with the distributed optimizer, as megatron-core's DDP config requires."""
    from megatron.core.distributed import DistributedDataParallelConfig

    plan = make_plan(model='llama-3.1-8b', nodes=2, tp=2, pp=2, zero=zero, micro_batch=1,
                     global_batch=64, seq_len=4096, framework='megatron')
    plan = dataclasses.replace(plan, constraints=dataclasses.replace(
        plan.constraints, overlap_grad_reduce=True))
    run_script(export_plan(plan, 'megatron').text, tmp_path,
               {'NODE_RANK': '0', 'MASTER_ADDR': 'h0'})
    argv = recorded_argv(tmp_path, 'torchrun')
    a = parse(argv[argv.index('pretrain_gpt.py') + 1:])
    assert a.overlap_grad_reduce
    assert a.overlap_param_gather == (zero == 1)
    config = DistributedDataParallelConfig(
        overlap_grad_reduce=a.overlap_grad_reduce, overlap_param_gather=a.overlap_param_gather,
        use_distributed_optimizer=a.use_distributed_optimizer)
    assert config.overlap_grad_reduce


@pytest.mark.parametrize('tp', [1, 2])
def test_tp_comm_overlap_and_bf16_grads_are_what_megatron_core_accepts(tmp_path, tp):
    """A plan timed with Megatron's TP overlap and bf16 main grads exports
    --tp-comm-overlap (a ``TransformerConfig`` field, which Megatron-LM's argument factory
    turns into that flag) only with TP > 1 and sequence parallelism, as
    megatron/training/arguments.py asserts, and --grad-reduce-in-bf16, which Megatron-LM maps
    to the DDP config's ``grad_reduce_in_fp32 = False`` (megatron/training/training.py)."""
    from megatron.core.distributed import DistributedDataParallelConfig

    plan = make_plan(model='llama-3.1-8b', nodes=2, tp=tp, pp=2, zero=1, micro_batch=1,
                     global_batch=64, seq_len=4096, framework='megatron')
    plan = dataclasses.replace(plan, constraints=dataclasses.replace(
        plan.constraints, tp_comm_overlap=True, grad_reduce_in_bf16=True))
    run_script(export_plan(plan, 'megatron').text, tmp_path,
               {'NODE_RANK': '0', 'MASTER_ADDR': 'h0'})
    argv = recorded_argv(tmp_path, 'torchrun')
    a = parse(argv[argv.index('pretrain_gpt.py') + 1:])
    assert a.tp_comm_overlap == (tp > 1)
    if a.tp_comm_overlap:  # Megatron's assertion
        assert a.sequence_parallel
    assert transformer_config(a, 16).tp_comm_overlap == (tp > 1)
    assert a.grad_reduce_in_bf16
    assert a.bf16
    ddp = DistributedDataParallelConfig(grad_reduce_in_fp32=not a.grad_reduce_in_bf16,
                                        use_distributed_optimizer=a.use_distributed_optimizer)
    assert not ddp.grad_reduce_in_fp32


def megatron_layers(config, monkeypatch) -> list[list[int]]:
    """Layers megatron-core builds on each (pp rank, virtual stage): its own
    ``get_num_layers_to_build`` (megatron/core/transformer/transformer_block.py), which
    reads the rank and the virtual-stage count from parallel_state for a layout."""
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    vpp = config.virtual_pipeline_model_parallel_size
    monkeypatch.setattr(parallel_state, '_VIRTUAL_PIPELINE_MODEL_PARALLEL_WORLD_SIZE', vpp)
    layers = []
    for rank in range(config.pipeline_model_parallel_size):
        monkeypatch.setattr(parallel_state, '_MPU_PIPELINE_MODEL_PARALLEL_RANK', rank)
        layers.append([get_num_layers_to_build(config, vp_stage=v if vpp else None,
                                               pp_rank=rank) for v in range(vpp or 1)])
    return layers


@pytest.mark.parametrize(('model', 'nodes', 'pp', 'vpp'), [
    ('llama-3.2-1b', 3, 3, 1),  # 16 layers: 6/5/5 without virtual stages
    ('llama-3.2-1b', 5, 5, 3),  # 15 virtual stages for 16 layers
    ('llama-3.1-8b', 4, 4, 3),  # PP divides the 32 layers, the virtual stages do not
    ('llama-3.1-8b', 4, 4, 2),  # even: --num-layers-per-virtual-pipeline-stage
])
def test_uneven_pipeline_is_what_megatron_core_builds(tmp_path, monkeypatch, model, nodes, pp,
                                                      vpp):
    plan = make_plan(model=model, nodes=nodes, tp=1, pp=pp, vpp=vpp, zero=1, micro_batch=1,
                     global_batch=120 * nodes, seq_len=2048, framework='megatron',
                     uneven_pipeline=True)
    run_script(export_plan(plan, 'megatron').text, tmp_path,
               {'NODE_RANK': '0', 'MASTER_ADDR': 'h0'})
    argv = recorded_argv(tmp_path, 'torchrun')
    a = parse(argv[argv.index('pretrain_gpt.py') + 1:])
    even = a.num_layers % (pp * vpp) == 0
    assert (a.pipeline_model_parallel_layout is None) == even
    config = transformer_config(a, nodes * 8)
    assert (config.virtual_pipeline_model_parallel_size or 1) == vpp
    check_stage_layers(megatron_layers(config, monkeypatch), plan.model.spec.num_layers, pp,
                       vpp)


def test_qwen3_235b_on_pp8_vpp4_as_megatron_bridge_runs_it(tmp_path, monkeypatch):
    """Megatron-Bridge's Qwen3-235B-A22B: 94 layers on PP 8 x VPP 4 (published run
    bridge-qwen3-235b-a22b-h100-fp8, tests/stacks/data/published_runs.toml)."""
    plan = make_plan(model='qwen3-235b-a22b', nodes=32, tp=2, pp=8, vpp=4, zero=1,
                     micro_batch=1, global_batch=8192, seq_len=4096, framework='megatron',
                     uneven_pipeline=True)
    run_script(export_plan(plan, 'megatron').text, tmp_path,
               {'NODE_RANK': '0', 'MASTER_ADDR': 'h0'})
    argv = recorded_argv(tmp_path, 'torchrun')
    a = parse(argv[argv.index('pretrain_gpt.py') + 1:])
    config = transformer_config(a, 256)
    assert config.virtual_pipeline_model_parallel_size == 4
    layers = megatron_layers(config, monkeypatch)
    check_stage_layers(layers, 94, 8, 4)
    assert max(map(sum, layers)) == 12  # ceil(94 / 8): two ranks hold 11
