"""Hostile inputs: every number a user can type is accepted inside its range or refused
with one line (exit 2), and nothing that is printed is negative, NaN or infinite.

Hypothesis drives the shared parser (planner.limits), the CLI's argv and the estimator
over the whole allowed range (not 4096 x 8). Time is bounded by pytest-timeout, never
asserted.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import limits
from planner.errors import InputError
from planner.hardware.catalog import find_gpu, load_interconnects
from planner.memory.peak import estimate
from planner.memory.training import TrainingSetup
from planner.models.presets import find_preset
from planner.timing.step_time import LayoutArrays, step_time_arrays
from tests.cli_helpers import run_cli

# Values from 0 to 10^30, negatives, NaN/inf, huge exponents, Unicode digits, blanks.
HOSTILE_TEXT = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.integers(1, 2**20).map(str),  # inside most ranges: the search itself runs
    st.integers(0, 10**30).map(lambda n: f'{n:_}'),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(['nan', 'NaN', 'inf', '-inf', 'Infinity', '1e309', '1e99999', '1e-99999',
                     '', ' ', '-', '0', '-0', '0.0', '4096.5', '٤٠٩٦', '４０９６', '²', '1_',
                     '4M', '4Mi', '4k', '2T', '1e12', '9007199254740993', '2**62', '0x10',
                     '1,024', '  8  ', '\u00a0', '1e3k', '.5', '5.', 'e5', '1.5e1',
                     '1' * 70]),
    st.from_regex(r'-?[0-9]{1,25}(\.[0-9]{0,4})?(e[+-]?[0-9]{1,6})?(k|M|B|G|T|Ki|Mi)?',
                  fullmatch=True),
    st.text(max_size=12),
)


@settings(max_examples=600, deadline=None)
@given(key=st.sampled_from(sorted(limits.RANGES)), text=HOSTILE_TEXT)
def test_parse_accepts_in_range_or_refuses_with_the_range(key, text):
    rng = limits.RANGES[key]
    try:
        value = limits.parse(key, text)
    except limits.LimitError as exc:
        refused = exc
    else:
        refused = None
    if refused is not None:
        assert refused.field == rng.flag
        assert '\n' not in str(refused)
        assert refused.kind in (limits.NOT_NUMBER, limits.NOT_WHOLE, limits.TOO_SMALL,
                                limits.TOO_LARGE, limits.EMPTY)
        return
    assert math.isfinite(value)
    assert rng.contains(value)
    assert isinstance(value, int) is rng.integer


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 10**12))
def test_counts_are_parsed_exactly(n):
    assert limits.parse('global_batch_tokens', str(n)) == n
    assert limits.parse('global_batch_tokens', f'{n:_}') == n
    assert limits.parse('global_batch_tokens', f'{n:,}') == n


def test_no_float_round_trip_above_2_to_the_53():
    with pytest.raises(limits.LimitError, match='above'):
        limits.parse('samples', '9007199254740993')  # refused by its range, not rounded
    assert limits.parse('samples', '90071992547409') == 90071992547409


@pytest.mark.parametrize(('text', 'expected'), [
    ('4k', 4000), ('4Ki', 4096), ('4M', 4_000_000), ('4Mi', 4_194_304),
    ('2B', 2 * 10**9), ('2G', 2 * 10**9), ('1T', 10**12), ('1Ti', 2**40)])
def test_suffixes(text, expected):
    assert limits.parse('samples', text) == expected


@pytest.mark.parametrize(('text', 'expected'), [
    ('1024', (1024, 'sequences')), ('1kseq', (1000, 'sequences')),
    ('4Mtok', (4_000_000, 'tokens')), ('4Mitok', (4_194_304, 'tokens')),
    ('4 Mi tokens', (4_194_304, 'tokens'))])
def test_global_batch_units(text, expected):
    assert limits.parse_global_batch(text) == expected


@pytest.mark.parametrize('text', ['4M', '4k', '1Mi', '2G'])
def test_global_batch_suffix_without_unit_is_ambiguous(text):
    with pytest.raises(limits.LimitError) as info:
        limits.parse_global_batch(text)
    assert info.value.kind == limits.AMBIGUOUS


# ---- the CLI's argv -----------------------------------------------------------------------

ESTIMATE_FLAGS = ('--seq-len', '--micro-batch', '--grad-accum', '--nodes', '--gpus-per-node',
                  '--tp', '--pp', '--cp', '--vpp', '--margin', '--lora-rank')
PLAN_FLAGS = ('--seq-len', '--nodes', '--gpus-per-node', '--global-batch',
              '--global-batch-tokens', '--tokens', '--samples', '--epochs', '--margin',
              '--price', '--top', '--max-micro-batch', '--tp', '--pp', '--micro-batch',
              '--base-lr', '--base-batch', '--b-noise')


def _numbers(doc, path=''):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _numbers(v, f'{path}.{k}')
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numbers(v, f'{path}[{i}]')
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, doc


def _check_outcome(code, out, err, allowed=(0, 1, 2)):
    assert code in allowed, err
    assert 'Traceback' not in err + out
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith('batchfit: error:')
        assert out == ''


@pytest.mark.timeout(900)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(ESTIMATE_FLAGS), text=HOSTILE_TEXT)
def test_estimate_argv(capsys, flag, text):
    argv = {'--model': 'llama-3.1-8b', '--seq-len': '4096', '--micro-batch': '1',
            '--gpu': 'h100-sxm', '--gpus-per-node': '8', '--zero': '3'}
    argv[flag] = text
    args = ['estimate', '--json'] + [x for kv in argv.items() for x in kv]
    code, out, err = run_cli(capsys, *args)
    _check_outcome(code, out, err, (0, 2))
    if code == 0:
        doc = json.loads(out)
        for path, value in _numbers(doc):
            if path.endswith('headroom_bytes'):
                assert math.isfinite(value)  # negative = short by, printed as such
            else:
                assert math.isfinite(value), path
                assert value >= 0, path


@pytest.mark.timeout(1200)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(PLAN_FLAGS), text=HOSTILE_TEXT)
def test_plan_argv(capsys, flag, text):
    argv = {'--model': 'qwen2.5-0.5b', '--seq-len': '2048', '--gpu': 'h100-sxm',
            '--global-batch': '64', '--tokens': '1B', '--top': '3'}
    if flag in ('--global-batch-tokens',):
        argv.pop('--global-batch')
    if flag in ('--samples', '--epochs'):
        argv.pop('--tokens')
        argv.setdefault('--samples', '100000')
    if flag == '--base-lr':
        argv['--base-batch'] = '32'
    if flag == '--base-batch':
        argv['--base-lr'] = '3e-4'
    argv[flag] = text
    args = ['plan', '--json', '--inter-node', 'ib-ndr'] + [x for kv in argv.items() for x in kv]
    code, out, err = run_cli(capsys, *args)
    _check_outcome(code, out, err)
    if code in (0, 1):
        doc = json.loads(out)
        for path, value in _numbers({'candidates': doc['candidates'],
                                     'search': doc['search']}):
            assert math.isfinite(value), path
            assert value >= 0, path


@pytest.mark.parametrize('argv', [
    ['--seq-len', '99999999999', '--micro-batch', '99999999'],
    ['--seq-len', str(2**24), '--micro-batch', str(2**20)],
    ['--seq-len', '1', '--micro-batch', '1'],
])
def test_estimate_extremes_never_print_a_negative_figure(capsys, argv):
    code, out, err = run_cli(capsys, 'estimate', '--model', 'llama-3.1-8b', '--gpu', 'h200',
                             '--gpus-per-node', '8', '--zero', '3', *argv)
    _check_outcome(code, out, err, (0, 2))
    if code == 0:
        assert not re.search(r'(?<![\w-])-\d', out), out  # no negative number


@pytest.mark.timeout(300)
@pytest.mark.parametrize('argv', [
    ['--global-batch', '9007199254740993'], ['--global-batch', '1e18'],
    ['--global-batch', str(2**62)], ['--global-batch', '1e20'],
    ['--global-batch', '1024', '--nodes', '1000000', '--gpus-per-node', '1000000'],
    ['--global-batch', '1024', '--nodes', '131072', '--gpus-per-node', '1024'],
    ['--global-batch', '7207200', '--nodes', '1024', '--gpus-per-node', '1024'],
    ['--global-batch', '4M'],
])
def test_plan_extremes_end_in_one_line(capsys, argv):
    code, out, err = run_cli(capsys, 'plan', '--model', 'llama-3.1-8b', '--seq-len', '4096',
                             '--gpu', 'h100-sxm', '--tokens', '1T', '--inter-node', 'ib-ndr',
                             *argv)
    _check_outcome(code, out, err, (2,))


# ---- the estimator and the time model over the whole allowed range ------------------------

MODELS = {name: find_preset(name) for name in ('gpt2', 'llama-3.1-8b', 'llama-3.1-405b',
                                               'mixtral-8x7b')}


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(sorted(MODELS)),
       seq_exp=st.integers(0, 24), mb_exp=st.integers(0, 20), accum=st.integers(1, 2**20),
       zero=st.integers(0, 3), recompute=st.sampled_from(['none', 'selective', 'full']),
       attention=st.sampled_from(['flash', 'eager']), dp=st.integers(1, 2**14))
def test_estimate_is_finite_over_the_allowed_range(model, seq_exp, mb_exp, accum, zero,
                                                   recompute, attention, dp):
    setup = TrainingSetup(seq_len=2**seq_exp, micro_batch=2**mb_exp, grad_accum=accum,
                          zero=zero, recompute=recompute, attention=attention, dp=dp)
    est = estimate(MODELS[model], setup, find_gpu('h100-sxm'))
    values = [*est.components.values(), *est.phases.values(), est.total_bytes,
              est.tensor_peak_bytes]
    assert all(math.isfinite(v) and v >= 0 for v in values)
    bigger = estimate(MODELS[model], setup.with_changes(micro_batch=2 ** min(mb_exp + 1, 20)))
    assert bigger.tensor_peak_bytes >= est.tensor_peak_bytes


@settings(max_examples=100, deadline=None)
@given(model=st.sampled_from(sorted(MODELS)), seq_exp=st.integers(0, 24),
       mb=st.integers(1, 2**20), accum=st.integers(1, 2**20), nodes=st.integers(1, 2**17),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]))
def test_step_time_is_finite_over_the_allowed_range(model, seq_exp, mb, accum, nodes, tp, pp):
    per_node = 8
    world = nodes * per_node
    dp = max(world // (tp * pp), 1)
    a = np.asarray
    layout = LayoutArrays(nodes=a([nodes]), gpus_per_node=a([per_node]), tp=a([tp]),
                          pp=a([pp]), vpp=a([1]), cp=a([1]), dp=a([dp]), micro_batch=a([mb]),
                          grad_accum=a([accum]), zero=a([1]), recompute=a([0]),
                          sequence_parallel=a([True]))
    st_ = step_time_arrays(MODELS[model], 2**seq_exp, find_gpu('h100-sxm'),
                           load_interconnects()['ib-ndr'], layout)
    for name in ('step_time_s', 'tokens_per_s', 'mfu', 'hfu', 'tokens_per_step'):
        value = np.asarray(getattr(st_, name), float)
        assert np.isfinite(value).all(), name
        assert (value >= 0).all(), name


def test_request_refuses_out_of_range_in_python_too():
    from planner.plans.request import PlanRequest

    with pytest.raises(InputError, match='--seq-len'):
        PlanRequest(model=MODELS['gpt2'], seq_len=2**30, gpu=find_gpu('h100-sxm'),
                    global_batch=8)
    with pytest.raises(InputError, match='--global-batch'):
        PlanRequest(model=MODELS['gpt2'], seq_len=1024, gpu=find_gpu('h100-sxm'),
                    global_batch=9007199254740993)
    with pytest.raises(InputError, match='GPUs in all'):
        PlanRequest(model=MODELS['gpt2'], seq_len=1024, gpu=find_gpu('h100-sxm'),
                    global_batch=8, max_nodes=2**17, gpus_per_node=1024,
                    inter_node=load_interconnects()['ib-ndr'])


@pytest.mark.parametrize('value', [10**400, -(10**5000), 2**70, float('inf'), float('nan'),
                                   True, '12', None, np.int64(2**62), np.float32(1.5)],
                         ids=lambda v: type(v).__name__)
def test_check_refuses_any_python_value_with_one_error(value):
    with pytest.raises(limits.LimitError):
        limits.check('seq_len', value)
