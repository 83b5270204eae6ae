"""Stage 4: the largest micro-batch of the full model, predicted then probed.

The estimator, with the overheads measured in stage 3, predicts the largest
micro-batch that fits the device (:func:`planner.calibrate.fit.largest_fitting_micro_batch`).
One probe trains the **full-depth** model at that size in a fresh process
(``python -m planner.calibrate --probe ...``, :func:`run_edge_probe`): no in-process
call fully resets the caching allocator after an OOM, and a crash or hang of the
probe is a failed probe, never the caller's (CALIBRATION.md §2). When it does not fit,
the next size comes from the estimator corrected by what the probe saw, never from
halving; at most :data:`MAX_EDGE_PROBES` probes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from planner.calibrate import fit
from planner.calibrate.environment import limit_memory
from planner.calibrate.probes import fake_peak_bytes, is_oom, sync, train_step
from planner.calibrate.proxy import build_proxy, make_optimizer, random_batch
from planner.calibrate.records import (
    PROBE_LOOP,
    MaxMicroBatchRecord,
    ProbeRecord,
    model_spec_to_dict,
)
from planner.hardware.devices import GpuSpec
from planner.memory.peak import Overheads, estimate
from planner.memory.training import TrainingSetup

if TYPE_CHECKING:
    from planner.calibrate.pipeline import Settings

MAX_EDGE_PROBES = 3


def largest_micro_batch(s: Settings, gpu: GpuSpec, overheads: Overheads,
                        progress: Callable[..., None]) -> MaxMicroBatchRecord:
    """Predict with the estimator, confirm with a probe in a fresh process.

    ``confirmed`` is 0 when even micro-batch 1 failed, None when no probe fit within
    :data:`MAX_EDGE_PROBES` (or the estimator already says micro-batch 1 does not fit,
    ``predicted`` 0: no probe is run).
    """
    progress('max_micro_batch', 0.0, 'predicting')
    capacity = gpu.memory_bytes
    predicted = fit.largest_fitting_micro_batch(s.spec, s.seq_len, s.precision, s.attention, gpu,
                                                overheads)
    if predicted == 0:
        return MaxMicroBatchRecord(capacity_bytes=capacity, predicted=0, confirmed=None)
    probes_done: list[ProbeRecord] = []
    b, scale = predicted, 1.0
    confirmed = None
    for k in range(MAX_EDGE_PROBES):
        progress('max_micro_batch', (k + 0.2) / MAX_EDGE_PROBES, f'probing micro-batch {b}')
        setup = TrainingSetup(seq_len=s.seq_len, micro_batch=b, precision=s.precision,
                              attention=s.attention, framework='hf', loop=PROBE_LOOP)
        est = estimate(s.spec, setup, gpu, margin_fraction=0.0, overheads=overheads)
        result = run_edge_probe({
            'model': model_spec_to_dict(s.spec), 'micro_batch': b, 'seq_len': s.seq_len,
            'precision': s.precision, 'attention': s.attention, 'device': s.device,
            'capacity_bytes': capacity, 'memory_limit_bytes': s.memory_limit_bytes,
            'overhead_bytes': int(est.total_bytes - est.tensor_peak_bytes)},
            python=s.python or sys.executable)
        probes_done.append(ProbeRecord(
            micro_batch=b, fits=bool(result['fits']),
            peak_allocated_bytes=int(result['peak_allocated_bytes']),
            peak_reserved_bytes=int(result['peak_reserved_bytes']),
            predicted_total_bytes=int(est.total_bytes), message=str(result.get('message', ''))))
        if result['fits']:
            confirmed = b
            break
        if b == 1:
            confirmed = 0
            break
        # Next size from the model, corrected by what the probe saw (never by halving): at
        # least enough to push this size over the edge, or the measured (after an OOM: a
        # lower bound of the needed) over the predicted tensor peak.
        measured = int(result['peak_allocated_bytes'])
        scale = max(scale * 1.05, 1.02 * capacity / max(est.total_bytes, 1),
                    measured / est.tensor_peak_bytes if measured else 0.0)
        b = max(fit.largest_fitting_micro_batch(s.spec, s.seq_len, s.precision, s.attention,
                                                gpu, overheads, scale=scale, below=b), 1)
    progress('max_micro_batch', 1.0, f'largest micro-batch {confirmed}')
    return MaxMicroBatchRecord(capacity_bytes=capacity, predicted=predicted, confirmed=confirmed,
                               probes=tuple(probes_done))


def does_not_fit_message(s: Settings, gpu: GpuSpec, mb: MaxMicroBatchRecord) -> str:
    """The exit-5 message: how much the model needs, what the device has, what to do."""
    setup = TrainingSetup(seq_len=s.seq_len, micro_batch=1, precision=s.precision,
                          attention=s.attention, framework='hf', loop=PROBE_LOOP)
    need = estimate(s.spec, setup).tensor_peak_bytes
    return (f'{s.spec.name} does not fit one {gpu.name} even at micro-batch 1 (about '
            f'{need / 2**30:,.1f} GiB of tensors, {mb.capacity_bytes / 2**30:,.1f} GiB '
            'available); the measurements were kept: plan a sharded layout with batchfit plan')


def edge_probe(config: dict[str, Any]) -> dict[str, Any]:
    """Train the full-depth model at one micro-batch; report whether it fits.

    ``config`` has ``model`` (ModelSpec fields), ``micro_batch``, ``seq_len``,
    ``precision``, ``attention``, ``device``, ``capacity_bytes`` and ``overhead_bytes``
    (what the device holds besides tensors, CPU only). On CUDA it trains two steps and
    catches an OOM (allocator retries count as not fitting, CALIBRATION.md §3); on the
    CPU it measures the fake peak and compares it with the capacity.
    """
    from planner.calibrate.records import model_spec_from_dict

    spec = model_spec_from_dict(config['model'])
    b, s = int(config['micro_batch']), int(config['seq_len'])
    precision, attention, device = config['precision'], config['attention'], config['device']
    if device == 'cpu':
        peak = fake_peak_bytes(spec, spec.num_layers, b, s, precision=precision,
                               attention=attention)
        fits = peak + int(config.get('overhead_bytes', 0)) <= int(config['capacity_bytes'])
        return {'event': 'probe', 'micro_batch': b, 'fits': fits, 'peak_allocated_bytes': peak,
                'peak_reserved_bytes': peak,
                'message': '' if fits else 'the fake-tensor peak exceeds the memory limit'}
    import torch

    if config.get('memory_limit_bytes'):
        limit_memory('cuda', int(config['memory_limit_bytes']))
    failure = ''
    try:
        p = build_proxy(spec, spec.num_layers, seq_len=s, attention=attention,
                        precision=precision, device='cuda')
        opt = make_optimizer(p)
        ids = random_batch(p, b, s, 'cuda')
        train_step(p, opt, ids, precision, 'cuda')
        torch.cuda.reset_peak_memory_stats()
        train_step(p, opt, ids, precision, 'cuda')
        sync('cuda')
    except Exception as exc:  # an OOM is a result; anything else is re-raised
        if not is_oom(exc):
            raise
        failure = str(exc).splitlines()[0][:300]
    if failure:  # outside the except block: the traceback no longer pins the tensors
        # What was live plus what it asked for: a lower bound of the peak it needed.
        needed = int(torch.cuda.max_memory_allocated()) + _requested_bytes(failure)
        return {'event': 'probe', 'micro_batch': b, 'fits': False,
                'peak_allocated_bytes': needed, 'peak_reserved_bytes': 0, 'message': failure}
    retries = int(torch.cuda.memory_stats().get('num_alloc_retries', 0))
    return {'event': 'probe', 'micro_batch': b, 'fits': retries == 0,
            'peak_allocated_bytes': int(torch.cuda.max_memory_allocated()),
            'peak_reserved_bytes': int(torch.cuda.max_memory_reserved()),
            'message': '' if retries == 0 else f'{retries} allocator retries (near OOM)'}


def _requested_bytes(message: str) -> int:
    """The size in "Tried to allocate 2.50 GiB" of a CUDA OOM message (0 if absent)."""
    match = re.search(r'Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)', message)
    if match is None:
        return 0
    units = {'B': 1, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30, 'TiB': 2**40}
    return int(float(match[1]) * units[match[2]])


def run_edge_probe(config: dict[str, Any], python: str = sys.executable,
                   timeout_s: float = 600.0) -> dict[str, Any]:
    """Run :func:`edge_probe` in a fresh ``python -m planner.calibrate --probe`` process.

    A crash or hang of the probe is a failed probe, never the caller's crash.
    """
    from planner.calibrate.protocol import parse_event

    cmd = [python, '-m', 'planner.calibrate', '--probe', json.dumps(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return _failed_probe(config, f'the probe hung for {timeout_s:.0f} s')
    finally:
        if proc.poll() is None:  # cancelled while waiting: take the probe down with us
            proc.kill()
            proc.wait()
    for line in out.splitlines():
        event = parse_event(line)
        if event is not None and event['event'] == 'probe':
            return event
    tail = (err.strip().splitlines() or [f'exit code {proc.returncode}'])[-1]
    return _failed_probe(config, f'the probe failed: {tail[:300]}')


def _failed_probe(config: dict[str, Any], message: str) -> dict[str, Any]:
    return {'event': 'probe', 'micro_batch': int(config['micro_batch']), 'fits': False,
            'peak_allocated_bytes': 0, 'peak_reserved_bytes': 0, 'message': message}
