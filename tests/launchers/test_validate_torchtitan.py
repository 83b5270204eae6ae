"""torchtitan exports: its ConfigManager, ParallelDims and the train.py batch rule."""

from __future__ import annotations

import dataclasses
import importlib.util
import typing

import pytest

from planner.export import ExportOptions, export_plan
from tests.export_helpers import (
    check_stage_layers,
    edited,
    launch_comment,
    make_plan,
    recorded_argv,
    run_script,
)
from tests.launchers.torchrun_check import check_launch
from tests.launchers.torchtitan_check import stub_triton_kernels

if importlib.util.find_spec('torchtitan') is None:
    pytest.skip('torchtitan is not installed', allow_module_level=True)
stub_triton_kernels()
pytest.importorskip('torchtitan.config')


def job_config(tmp_path, text):
    from torchtitan.config import ConfigManager

    path = tmp_path / 'torchtitan.toml'
    path.write_text(text)
    return ConfigManager().parse_args(['--job.config_file', str(path)])


def check_types(config) -> None:
    """0.2.2 does not type-check TOML values: check every field we wrote."""
    for section in dataclasses.fields(config):
        value = getattr(config, section.name)
        if not dataclasses.is_dataclass(value):
            continue
        hints = typing.get_type_hints(type(value))
        for f in dataclasses.fields(value):
            hint, got = hints[f.name], getattr(value, f.name)
            origin = typing.get_origin(hint)
            if hint in (int, float, str, bool):
                ok = isinstance(got, hint) or (hint is float and isinstance(got, int))
                assert ok, (section.name, f.name)
                assert not (hint is int and isinstance(got, bool)), (section.name, f.name)
            elif origin is typing.Literal:
                assert got in typing.get_args(hint), (section.name, f.name, got)


@pytest.mark.parametrize(('tp', 'pp', 'vpp', 'zero', 'recompute'), [
    (1, 1, 1, 2, 'selective'), (1, 1, 1, 3, 'full'), (2, 2, 1, 3, 'selective'),
    (2, 2, 2, 3, 'none'), (1, 2, 1, 2, 'full'), (1, 2, 1, 3, 'half')])
def test_config_and_parallel_dims(tmp_path, tp, pp, vpp, zero, recompute):
    from torchtitan.distributed.parallel_dims import ParallelDims

    plan = make_plan(model='llama-3.1-8b', nodes=4, tp=tp, pp=pp, vpp=vpp, zero=zero,
                     recompute=recompute, micro_batch=1, global_batch=256, seq_len=4096,
                     framework='torchtitan')
    exported = export_plan(plan, 'torchtitan')
    config = job_config(tmp_path, exported.text)
    check_types(config)
    p, t = config.parallelism, config.training
    c = plan.candidate
    dims = ParallelDims(dp_shard=p.data_parallel_shard_degree,
                        dp_replicate=p.data_parallel_replicate_degree,
                        cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                        pp=p.pipeline_parallel_degree, ep=1, etp=1, world_size=32)
    assert dims.dp_replicate * dims.dp_shard == c.dp
    data_parallel = dims.dp_replicate * dims.dp_shard
    assert t.global_batch_size % (t.local_batch_size * data_parallel) == 0  # train.py's rule
    accumulation = t.global_batch_size // (t.local_batch_size * data_parallel)
    if pp > 1:
        assert t.local_batch_size % p.pipeline_parallel_microbatch_size == 0
        microbatches = t.local_batch_size // p.pipeline_parallel_microbatch_size
        assert (accumulation, microbatches) == (1, c.grad_accum)
    else:
        assert accumulation == c.grad_accum
    assert t.global_batch_size == c.global_batch == 256
    assert (config.model.name, config.model.flavor) == ('llama3', '8B')
    assert config.lr_scheduler.warmup_steps == plan.guidance.warmup_steps
    ac = config.activation_checkpoint
    if recompute == 'half':  # every layer of even index checkpointed
        assert (ac.mode, ac.selective_ac_option) == ('selective', '2')
    else:
        assert ac.mode == recompute
        assert recompute != 'selective' or ac.selective_ac_option == 'op'
    # the plan's own recipe: FSDP2 MixedPrecisionPolicy(param bf16, reduce fp32)
    assert c.framework == 'torchtitan'
    assert c.precision == 'fsdp-bf16'
    assert (t.mixed_precision_param, t.mixed_precision_reduce) == ('bfloat16', 'float32')
    with pytest.raises((AssertionError, ValueError), match='Invalid parallel dims'):
        ParallelDims(dp_shard=p.data_parallel_shard_degree,
                     dp_replicate=p.data_parallel_replicate_degree, cp=1, tp=tp, pp=pp, ep=1,
                     etp=1, world_size=24)


def test_pure_data_parallel_replicates(tmp_path):
    plan = make_plan(nodes=2, zero=0, global_batch=256, framework='torchtitan')
    p = job_config(tmp_path, export_plan(plan, 'torchtitan').text).parallelism
    assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree) == (16, 1)


def test_launch_comment_runs_the_same_processes(tmp_path):
    plan = make_plan(nodes=2, zero=3, framework='torchtitan')
    text = export_plan(plan, 'torchtitan', ExportOptions(rdzv='c10d')).text
    run_script(launch_comment(text), tmp_path, {'MASTER_ADDR': 'head'})
    argv = recorded_argv(tmp_path, 'torchrun')
    check_launch(argv, 2, 8)
    assert argv[-4:] == ['-m', 'torchtitan.train', '--job.config_file', 'torchtitan.toml']


def test_unknown_model_gets_a_flavor_torchtitan_rejects(tmp_path):
    plan = make_plan(model='qwen2.5-0.5b', nodes=1, zero=3, global_batch=64,
                     framework='torchtitan')
    config = job_config(tmp_path, export_plan(plan, 'torchtitan').text)
    from torchtitan.protocols.train_spec import get_train_spec

    spec = get_train_spec(config.model.name)
    assert config.model.flavor not in spec.model_args


def test_float8_compile_and_async_tp_parse_as_torchtitan_reads_them(tmp_path):
    """The switches land in torchtitan 0.2.2's own JobConfig fields, the converter name is
    one torchtitan registers, and its async-TP check accepts the config."""
    import torch._inductor.config as inductor_config
    from torchtitan.components.quantization import float8  # noqa: F401 (registers it)
    from torchtitan.distributed.tensor_parallel import maybe_enable_async_tp
    from torchtitan.protocols.model_converter import _registry_model_converter_cls

    plan = make_plan(model='llama-3.1-8b', nodes=2, tp=2, zero=3, micro_batch=1,
                     global_batch=64, seq_len=4096, framework='torchtitan', precision='fp8',
                     compile=True, async_tp=True)
    config = job_config(tmp_path, export_plan(plan, 'torchtitan').text)
    check_types(config)
    assert config.model.converters == ['quantize.linear.float8']
    assert set(config.model.converters) <= set(_registry_model_converter_cls)
    f8 = config.quantize.linear.float8
    assert f8.enable_fsdp_float8_all_gather
    assert f8.precompute_float8_dynamic_scale_for_fsdp
    assert f8.filter_fqns == ['output']
    assert config.compile.enable
    assert config.compile.components == ['model', 'loss']
    assert config.parallelism.enable_async_tensor_parallel
    before = inductor_config._micro_pipeline_tp
    try:
        maybe_enable_async_tp(config, None)  # raises without compile
        assert inductor_config._micro_pipeline_tp
    finally:
        inductor_config._micro_pipeline_tp = before


def test_switches_off_by_default(tmp_path):
    plan = make_plan(model='llama-3.1-8b', nodes=2, zero=3, micro_batch=1, global_batch=64,
                     seq_len=4096, framework='torchtitan')
    config = job_config(tmp_path, export_plan(plan, 'torchtitan').text)
    assert config.model.converters == []
    assert not config.compile.enable
    assert not config.parallelism.enable_async_tensor_parallel


@pytest.mark.parametrize('zero', [2, 3])
def test_hsdp_exports_replicate_and_shard_degrees(tmp_path, zero):
    """An HSDP plan (FSDP within a node, replicated across nodes) is written as
    torchtitan's data_parallel_replicate_degree x data_parallel_shard_degree, which its
    ParallelDims accepts."""
    from torchtitan.distributed.parallel_dims import ParallelDims

    plan = make_plan(model='llama-3.2-1b', nodes=4, zero=zero, micro_batch=1,
                     global_batch=256, seq_len=4096, framework='torchtitan')
    plan = edited(plan, dp_replicate=4)
    config = job_config(tmp_path, export_plan(plan, 'torchtitan').text)
    p = config.parallelism
    assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree) == (4, 8)
    assert p.fsdp_reshard_after_forward == ('default' if zero == 3 else 'never')
    dims = ParallelDims(dp_shard=p.data_parallel_shard_degree,
                        dp_replicate=p.data_parallel_replicate_degree,
                        cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                        pp=p.pipeline_parallel_degree, ep=1, etp=1, world_size=32)
    assert dims.dp_replicate_enabled
    assert dims.fsdp_enabled


def titan_layers(config, num_layers: int, monkeypatch) -> list[list[int]]:
    """Layers torchtitan 0.2.2 builds on each (pp rank, virtual stage): its own
    ``pipeline_llm`` (torchtitan/distributed/pipeline_parallel.py: the stage count from
    the config, ``generate_llm_fqn_per_model_part`` or ``module_fqns_per_model_part``,
    ``pipeline_module_split``'s pruning and looped stage order) on a model of identity
    layers; only the torch ``PipelineStage`` and the schedule are stand-ins (they need
    a process group)."""
    import types

    import torch
    from torch import nn
    from torchtitan.distributed import pipeline_parallel

    def stage(model, *args, **kwargs):
        return types.SimpleNamespace(submod=model, is_first=False, is_last=False)

    monkeypatch.setattr(pipeline_parallel, 'PipelineStage', stage)
    monkeypatch.setattr(pipeline_parallel, 'build_pipeline_schedule', lambda *a: None)
    model = nn.Module()
    model.tok_embeddings, model.norm, model.output = nn.Identity(), nn.Identity(), nn.Identity()
    model.layers = nn.ModuleDict({str(i): nn.Identity() for i in range(num_layers)})
    pp, layers = config.parallelism.pipeline_parallel_degree, []
    for rank in range(pp):
        mesh = types.SimpleNamespace(get_local_rank=lambda r=rank: r, size=lambda: pp,
                                     get_group=lambda name: None)
        dims = types.SimpleNamespace(pp=pp, get_mesh=lambda name, m=mesh: m)
        _, parts, _, _ = pipeline_parallel.pipeline_llm(
            model, dims, config, torch.device('cpu'),
            types.SimpleNamespace(n_layers=num_layers), lambda m, *a: m, None)
        layers.append([len(part.layers) for part in parts])
    return layers


@pytest.mark.parametrize(('model', 'nodes', 'pp', 'vpp'), [
    ('llama-3.1-8b', 2, 2, 1), ('llama-3.1-8b', 4, 4, 2),  # even
    ('llama-3.2-1b', 3, 3, 1),  # 16 layers: 6/5/5
    ('llama-3.2-1b', 5, 5, 3),  # 15 virtual stages for 16 layers
    ('llama-3.1-8b', 4, 4, 3),  # PP divides the 32 layers, the virtual stages do not
])
def test_pipeline_split_is_what_torchtitan_builds(tmp_path, monkeypatch, model, nodes, pp, vpp):
    plan = make_plan(model=model, nodes=nodes, pp=pp, vpp=vpp, zero=3, micro_batch=1,
                     global_batch=120 * nodes, seq_len=2048, framework='torchtitan',
                     uneven_pipeline=True)
    config = job_config(tmp_path, export_plan(plan, 'torchtitan').text)
    check_types(config)
    num_layers = plan.model.spec.num_layers
    check_stage_layers(titan_layers(config, num_layers, monkeypatch), num_layers, pp, vpp)


@pytest.mark.parametrize(('pp', 'vpp', 'schedule'), [
    (2, 2, 'InterleavedZeroBubble'), (4, 2, 'InterleavedZeroBubble'), (2, 1, '1F1B')])
def test_zero_bubble_schedule_parses_and_torch_builds_it(tmp_path, pp, vpp, schedule):
    """torchtitan 0.2.2 reads the schedule name, torch resolves it to a multi-stage class
    for 2+ stages a rank and builds the schedule for the plan's (p, v, m) (on stand-in
    stages: no process group), with the action order the planner simulates."""
    import torch
    from torch.distributed.pipelining import schedules

    from planner.stacks.pipeline_schedule import rank_orders

    plan = make_plan(model='llama-3.1-8b', nodes=4, tp=2, pp=pp, vpp=vpp, zero=3,
                     micro_batch=1, global_batch=256, seq_len=4096, framework='torchtitan')
    plan = dataclasses.replace(plan, constraints=dataclasses.replace(plan.constraints,
                                                                     zero_bubble=True))
    config = job_config(tmp_path, export_plan(plan, 'torchtitan').text)
    check_types(config)
    p = config.parallelism
    assert p.pipeline_parallel_schedule == schedule
    cls = schedules.get_schedule_class(p.pipeline_parallel_schedule)
    assert issubclass(cls, schedules.PipelineScheduleMulti) == (vpp > 1)
    if vpp == 1:
        return
    m = plan.candidate.grad_accum

    class Stage:  # what the schedule's constructor reads of a PipelineStage
        def __init__(self, index: int) -> None:
            self.stage_index, self.group_size, self.group_rank = index, pp, 0
            self.num_stages, self.submod = pp * vpp, torch.nn.Linear(2, 2)
            self.is_first, self.is_last = index == 0, index == pp * vpp - 1
            self.stage_index_to_group_rank = {i: i % pp for i in range(pp * vpp)}

    built = cls([Stage(k * pp) for k in range(vpp)], m)
    c = schedules._ComputationType
    kinds = {c.FORWARD: 'F', c.BACKWARD_INPUT: 'B', c.BACKWARD_WEIGHT: 'W',
             c.FULL_BACKWARD: 'FULL'}
    got = [[(a.stage_index, kinds[a.computation_type], a.microbatch_index)
            for a in built.pipeline_order[r] if a is not None] for r in range(pp)]
    assert got == rank_orders(schedule, pp, vpp, m)
