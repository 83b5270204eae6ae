"""torchtitan's own switches: float8 (``--precision fp8``), torch.compile, async TP."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.errors import InputError
from planner.hardware.catalog import find_gpu
from planner.memory.recipes import RECIPES
from planner.models.presets import find_preset
from planner.plans.request import LayoutLimits, PlanRequest
from planner.plans.search import search
from planner.stacks import STACKS
from planner.timing.stack_speed import float8_linear_params
from planner.timing.step_time import (
    LayoutArrays,
    StepTimeOptions,
    _stage_bytes,
    step_time_arrays,
)
from tests.cli_helpers import run_cli

MODEL = find_preset('llama-3.1-8b')
GPU = find_gpu('h100-sxm')


def request(**kw) -> PlanRequest:
    base = {'model': MODEL, 'seq_len': 8192, 'gpu': GPU, 'max_nodes': 1, 'gpus_per_node': 8,
            'global_batch': 16, 'framework': 'torchtitan', 'zero_stages': (3,),
            'recompute_modes': ('selective',),
            'limits': LayoutLimits(tp=(1,), pp=(1,), cp=(1,), micro_batch=(2,), gpus=(8,))}
    return PlanRequest(**{**base, **kw})


def fsdp8(zero: int = 3) -> LayoutArrays:
    a = np.asarray
    return LayoutArrays(nodes=a(1), gpus_per_node=a(8), tp=a(1), pp=a(1), vpp=a(1), cp=a(1),
                        dp=a(8), micro_batch=a(2), grad_accum=a(1), zero=a(zero),
                        recompute=a(1), sequence_parallel=a(True))


def titan_step(precision: str, **options):
    return step_time_arrays(MODEL, 8192, GPU, None, fsdp8(), precision=precision,
                            framework='torchtitan', options=StepTimeOptions(**options))


# ---- refused where a stack does not run them ------------------------------------------------

@pytest.mark.parametrize('stack', ['megatron', 'hf', 'hf-deepspeed', 'deepspeed'])
def test_compile_refused_for_stacks_without_it(stack):
    with pytest.raises(InputError, match=stack) as err:
        request(framework=stack, zero_stages=(0, 1, 2, 3), compile=True,
                recompute_modes=('none', 'full'), limits=LayoutLimits())
    assert err.value.field == '--compile'


def test_async_tp_needs_compile():
    with pytest.raises(InputError) as err:
        request(async_tp=True)
    assert err.value.field == '--async-tp'


def test_a_switch_narrows_an_open_search_to_the_stacks_that_have_it():
    req = request(framework='', compile=True, zero_stages=(0, 1, 2, 3),
                  recompute_modes=('none', 'selective', 'full'))
    assert [s.key for s in req.stacks()] == ['torchtitan']


def test_fp8_is_float8_in_torchtitan_and_transformer_engine_in_megatron():
    # float8 is modelled on torchtitan's FSDP2 mode (ZeRO 2-3), not its replicate-only DDP
    assert [(m.name, m.precision) for m in STACKS['torchtitan'].modes_for(False, 'fp8')] == [
        ('fsdp', 'fsdp-fp8')]
    assert [m.precision for m in STACKS['megatron'].modes_for(False, 'fp8')] == ['fp8']
    req = request(framework='', precision='fp8', zero_stages=(0, 1, 2, 3),
                  recompute_modes=('none', 'selective', 'full'))
    assert {(m.stack, m.precision) for m in req.plan_modes()} == {
        ('torchtitan', 'fsdp-fp8'), ('megatron', 'fp8')}


def test_cli_refuses_compile_for_megatron(capsys):
    code, _, err = run_cli(capsys, 'plan', '--model', 'llama-3.1-8b', '--seq-len', '4096',
                           '--gpu', 'h100-sxm', '--global-batch', '16', '--tokens', '1B',
                           '--framework', 'megatron', '--compile')
    assert code == 2
    assert '--compile' in err
    assert 'megatron' in err


# ---- time ------------------------------------------------------------------------------------

def test_float8_lowers_the_step_time_and_halves_the_matmul_all_gather():
    bf16, fp8 = titan_step('fsdp-bf16'), titan_step('fsdp-fp8')
    assert float(fp8.compute_s) < 0.8 * float(bf16.compute_s)  # linears at the fp8 rate
    assert float(fp8.elementwise_s) > float(bf16.elementwise_s)  # the casts cost HBM time
    assert float(fp8.step_time_s) < float(bf16.step_time_s)
    t, p = np.asarray(1), np.asarray(1)
    b = _stage_bytes(MODEL, RECIPES['fsdp-bf16'], t, p, None)
    f = _stage_bytes(MODEL, RECIPES['fsdp-fp8'], t, p, None)
    converted = MODEL.num_layers * float8_linear_params(MODEL)
    assert float(b.gather_bytes - f.gather_bytes) == pytest.approx(converted)  # 2 B -> 1 B
    assert float(f.grad_bytes) == float(b.grad_bytes)  # gradients reduce in fp32 as before
    assert float(fp8.dp_traffic_s) < float(bf16.dp_traffic_s)


def test_float8_converts_the_layers_not_the_head():
    h, f = MODEL.hidden_size, MODEL.ffn_size
    per_layer = 2 * h * MODEL.q_size + 2 * h * MODEL.kv_size + 3 * h * f
    assert float8_linear_params(MODEL) == per_layer
    assert MODEL.num_layers * per_layer < MODEL.matmul_params_per_token()  # the head is left


def test_compile_divides_compute_but_not_the_attention_core():
    eager, compiled = titan_step('fsdp-bf16'), titan_step('fsdp-bf16', compute_speedup=1.2)
    assert float(compiled.elementwise_s) == pytest.approx(float(eager.elementwise_s) / 1.2)
    # the SDPA kernels are the same compiled or not: less than the full 1.2x on the GEMMs
    assert float(eager.compute_s) / 1.2 < float(compiled.compute_s) < float(eager.compute_s)
    assert float(compiled.optimizer_s) == pytest.approx(float(eager.optimizer_s))
    # the longer the sequence, the larger the attention core's share: less gain
    long_eager = step_time_arrays(MODEL, 32768, GPU, None, fsdp8(), precision='fsdp-bf16',
                                  framework='torchtitan')
    long_compiled = step_time_arrays(MODEL, 32768, GPU, None, fsdp8(), precision='fsdp-bf16',
                                     framework='torchtitan',
                                     options=StepTimeOptions(compute_speedup=1.2))
    gain = float(eager.compute_s / compiled.compute_s)
    assert float(long_eager.compute_s / long_compiled.compute_s) < gain


def test_search_prices_the_switches_but_not_their_memory():
    """compile and async TP change the time; the memory stays the eager figure (on the high
    side of the published saving)."""
    limits = LayoutLimits(tp=(2,), pp=(1,), cp=(1,), micro_batch=(2,), gpus=(8,))
    eager = search(request(limits=limits)).best
    compiled = search(request(limits=limits, compile=True)).best
    overlapped = search(request(limits=limits, compile=True, async_tp=True)).best
    assert compiled.step_time_s < eager.step_time_s
    assert overlapped.step_time_s < compiled.step_time_s  # TP 2: collectives to hide
    assert compiled.memory.total_bytes == eager.memory.total_bytes
    fp8 = search(request(limits=limits, precision='fp8', compile=True)).best
    assert fp8.precision == 'fsdp-fp8'
    assert fp8.step_time_s < compiled.step_time_s


def test_plan_json_records_the_switches():
    req = request(compile=True)
    assert req.to_dict()['compile'] is True
    assert dataclasses.replace(req, compile=False).to_dict()['compile'] is False


def test_estimate_keeps_fp8_for_megatron_unless_torchtitan_is_named(capsys):
    """``--precision fp8`` alone still means Transformer Engine's recipe; torchtitan's float8
    runs its FSDP2 mode only, so ZeRO 0 is refused there, naming --zero."""
    args = ('estimate', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--gpu', 'h100-sxm',
            '--micro-batch', '2', '--precision', 'fp8')
    code, out, _ = run_cli(capsys, *args)
    assert code == 0
    assert 'Stack: megatron (Megatron-LM, fp8)' in out
    code, out, _ = run_cli(capsys, *args, '--framework', 'torchtitan', '--zero', '3')
    assert code == 0
    assert 'fsdp-fp8' in out
    code, _, err = run_cli(capsys, *args, '--framework', 'torchtitan', '--zero', '0')
    assert code == 2
    assert '--zero' in err
    assert 'fp8' in err


def test_plan_header_names_the_switches(capsys):
    code, out, _ = run_cli(capsys, 'plan', '--model', 'llama-3.1-8b', '--seq-len', '8192',
                           '--gpu', 'h100-sxm', '--global-batch', '16', '--tokens', '1B',
                           '--framework', 'torchtitan', '--precision', 'fp8', '--compile',
                           '--async-tp', '--top', '1')
    assert code == 0
    assert 'stacks torchtitan · compile · async TP · ' in out
    assert 'fsdp-fp8' in out


def test_saved_plan_shows_and_exports_its_switches(capsys, tmp_path):
    path = tmp_path / 'plan.json'
    code, _, _ = run_cli(capsys, 'plan', '--model', 'llama-3.1-8b', '--seq-len', '8192',
                         '--gpu', 'h100-sxm', '--global-batch', '16', '--tokens', '1B',
                         '--framework', 'torchtitan', '--precision', 'fp8', '--compile',
                         '--top', '1', '--save', str(path))
    assert code == 0
    code, out, _ = run_cli(capsys, 'show', str(path))
    assert code == 0
    assert 'torchtitan · compile · ZeRO' in out
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'torchtitan')
    assert code == 0
    assert '[compile]\nenable = true' in out
    assert 'converters = ["quantize.linear.float8"]' in out
    assert 'enable_async_tensor_parallel' not in out
