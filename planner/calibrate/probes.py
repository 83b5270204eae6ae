"""The measurements of stages 2 and 3: GEMM throughput, proxy steps, proxy memory.

Runs only in the calibration child (and its probe grandchildren); every function
imports torch itself. Methodology (docs/calibration.md):

* time with CUDA events over a window of steps and one synchronisation at its end on a
  GPU; on the (synchronous) CPU with :func:`cpu_clock`; discard warm-up steps; keep
  the minimum over repeats, interleaving configurations so drift hits all alike;
* memory from ``torch.cuda`` statistics per configuration (``reset_peak_memory_stats``
  before each) on a GPU; on the CPU from ``MemTracker`` under ``FakeTensorMode``, the
  exact live tensor bytes without allocating (torch/distributed/_tools/mem_tracker.py);
* classify an OOM by type first (``torch.cuda.OutOfMemoryError``), then by the string
  fallbacks Lightning and accelerate use (:func:`is_oom`).

The environment (stage 1) is in ``planner.calibrate.environment``, the edge probe
(stage 4) in ``planner.calibrate.edge``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from planner.calibrate.proxy import (
    Proxy,
    autocast_context,
    build_proxy,
    compute_dtype_name,
    make_optimizer,
    mlp_width,
    proxy_loss,
    random_batch,
)
from planner.calibrate.records import MatmulPoint
from planner.models.spec import ModelSpec

# The messages Lightning (src/lightning/pytorch/utilities/memory.py) and accelerate
# (src/accelerate/utils/memory.py) treat as OOM when the exception type does not say.
OOM_MESSAGES: tuple[str, ...] = (
    'CUDA out of memory', ' out of memory.', 'HIP out of memory',
    'CUDNN_STATUS_NOT_SUPPORTED', 'DefaultCPUAllocator: can\'t allocate memory',
    'PT_DEVMEM Allocation failed', 'CUBLAS_STATUS_ALLOC_FAILED',
)
CPU_COPY_BYTES = 32 << 20
CUDA_COPY_BYTES = 256 << 20


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error (type first, then the known messages)."""
    import torch

    oom_type = getattr(torch.cuda, 'OutOfMemoryError', None) or getattr(torch, 'OutOfMemoryError',
                                                                        None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    if not isinstance(exc, RuntimeError) or len(exc.args) != 1:
        return False
    text = str(exc.args[0])
    return any(m in text for m in OOM_MESSAGES) or ('CUDA' in text and 'out of memory' in text)


def cpu_clock() -> Callable[[], float]:
    """The CPU's step clock: this thread's CPU time when torch runs single-threaded.

    On one thread a training step is pure computation in the calling thread (CPU
    autograd runs there too), so its CPU time is its duration on a quiet machine, and
    the time a neighbour process holds the core is not counted: on a shared 2-vCPU VM
    this cut the spread of repeated measurements several-fold. With more threads the
    work happens in the pool too, so wall time it is.
    """
    import torch

    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def sync(device: str) -> None:
    """Wait for queued GPU work (nothing to wait for on the CPU)."""
    if device == 'cuda':
        import torch

        torch.cuda.synchronize()


# ---- bandwidth and GEMMs ---------------------------------------------------------------------

class Clock:
    """Elapsed seconds of a piece of work: CUDA events on a GPU, :func:`cpu_clock` on a CPU."""

    def __init__(self, device: str) -> None:
        self.device = device

    def time(self, work: Callable[[], Any], repeats: int) -> float:
        """Minimum over ``repeats`` runs of ``work`` (one untimed run first)."""
        import torch

        work()
        if self.device == 'cuda':
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            for start, end in zip(starts, ends, strict=True):
                start.record()
                work()
                end.record()
            torch.cuda.synchronize()
            return min(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)) / 1e3
        now = cpu_clock()
        best = float('inf')
        for _ in range(repeats):
            t0 = now()
            work()
            best = min(best, now() - t0)
        return best


def copy_bandwidth(device: str, repeats: int = 5) -> float:
    """Device-memory bandwidth of a large copy, read + write bytes per second."""
    import torch

    nbytes = CUDA_COPY_BYTES if device == 'cuda' else CPU_COPY_BYTES
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = Clock(device).time(lambda: dst.copy_(src), repeats)
    return 2.0 * nbytes / seconds


def model_gemms(spec: ModelSpec) -> list[tuple[str, int, int]]:
    """The model's GEMMs per token as (name, k, n): one layer's projections and the head."""
    h = spec.hidden_size
    f = mlp_width(spec)
    return [('qkv', h, spec.q_size + 2 * spec.kv_size), ('attention_out', spec.q_size, h),
            ('mlp_in', h, f * (2 if spec.gated_mlp else 1)), ('mlp_out', f, h),
            ('head', h, spec.vocab_size)]


def time_gemms(spec: ModelSpec, tokens: Sequence[int], precision: str, device: str,
               repeats: int, on_step: Callable[[float, str], None] | None = None,
               ) -> list[MatmulPoint]:
    """Forward + both backward GEMMs of each model shape at each token count."""
    import torch

    dtype = getattr(torch, compute_dtype_name(precision))
    clock = Clock(device)
    shapes = model_gemms(spec)
    points = []
    jobs = [(t, s) for t in tokens for s in shapes]
    for i, (t, (name, k, n)) in enumerate(jobs):
        x = torch.randn(t, k, dtype=dtype, device=device)
        w = torch.randn(k, n, dtype=dtype, device=device)
        dy = torch.randn(t, n, dtype=dtype, device=device)

        def three(x=x, w=w, dy=dy) -> None:
            x @ w  # forward
            dy @ w.t()  # input gradient
            x.t() @ dy  # weight gradient

        points.append(MatmulPoint(name=name, tokens=int(t), k=k, n=n,
                                  time_s=clock.time(three, repeats), flops=6.0 * t * k * n))
        if on_step is not None:
            on_step((i + 1) / len(jobs), f'{name} at {t} tokens')
    return points


def square_gemm_flops(dtype_name: str, device: str, size: int, repeats: int = 3) -> float:
    """FLOP/s of one square GEMM (for a dtype the model's sweep did not use)."""
    import torch

    a = torch.randn(size, size, dtype=getattr(torch, dtype_name), device=device)
    return 2.0 * size**3 / Clock(device).time(lambda: a @ a, repeats)


# ---- the proxy: time and memory ------------------------------------------------------------

@dataclass(frozen=True)
class ProxyTiming:
    """Minima over the timed repeats of one configuration (seconds) and its memory."""

    layers: int
    micro_batch: int
    seq_len: int
    forward_backward_s: float
    optimizer_s: float
    repeats: int
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    num_alloc_retries: int = 0
    num_ooms: int = 0


def train_step(p: Proxy, opt: Any, ids: Any, precision: str, device: str) -> None:
    with autocast_context(precision, device):
        loss = proxy_loss(p, ids)
    loss.backward()
    del loss
    opt.step()
    opt.zero_grad(set_to_none=True)


def _timed_steps(p: Proxy, opt: Any, ids: Any, precision: str, device: str,
                 steps: int) -> list[tuple[float, float]]:
    """(forward-backward s, optimizer s) of ``steps`` consecutive steps."""
    import torch

    if device == 'cuda':
        marks = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(steps)]
        for start, mid, end in marks:
            start.record()
            with autocast_context(precision, device):
                loss = proxy_loss(p, ids)
            loss.backward()
            del loss
            mid.record()
            opt.step()
            opt.zero_grad(set_to_none=True)
            end.record()
        torch.cuda.synchronize()  # once per window: per-step syncs distort overlap
        return [(s.elapsed_time(m) / 1e3, m.elapsed_time(e) / 1e3) for s, m, e in marks]
    now = cpu_clock()
    out = []
    for _ in range(steps):
        t0 = now()
        with autocast_context(precision, device):
            loss = proxy_loss(p, ids)
        loss.backward()
        del loss
        t1 = now()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append((t1 - t0, now() - t1))
    return out


def time_proxy(spec: ModelSpec, depths: Sequence[int], configs: Sequence[tuple[int, int]], *,
               precision: str, attention: str, device: str, repeats: int, warmup: int,
               window: int = 1, on_step: Callable[[float], None] | None = None,
               ) -> list[ProxyTiming]:
    """Train a proxy of each depth on each (micro_batch, seq_len) configuration.

    Per depth: one step first (it creates the optimizer state), then per configuration
    in ascending size a memory pass (CUDA: peak statistics of one step) and ``warmup``
    untimed steps. Then ``repeats`` rounds in which every (depth, configuration) runs a
    ``window`` of timed steps, in an order rotated each round, so drift on a shared
    machine hits the depths alike and the per-layer difference stays unbiased.
    (Several depths at once hold several proxies: the caller passes one depth at a
    time where memory is tight.)

    Raises:
        RuntimeError: whatever torch raises (an OOM included; see :func:`is_oom`).
    """
    import torch

    torch.manual_seed(0)
    if device == 'cuda' and precision == 'tf32':
        torch.backends.cuda.matmul.allow_tf32 = True
    configs = sorted(configs, key=lambda c: c[0] * c[1])
    seq = max(s for _, s in configs)
    runs, memory = {}, {}
    for depth in depths:
        p = build_proxy(spec, depth, seq_len=seq, attention=attention, precision=precision,
                        device=device)
        opt = make_optimizer(p)
        batches = {c: random_batch(p, c[0], c[1], device) for c in configs}
        train_step(p, opt, batches[configs[0]], precision, device)
        for c in configs:
            memory[(depth, c)] = _memory_pass(p, opt, batches[c], precision, device)
            runs[(depth, c)] = (p, opt, batches[c])
        for _ in range(warmup):
            for c in configs:
                train_step(p, opt, batches[c], precision, device)
    jobs = list(runs)
    samples: dict[Any, list[tuple[float, float]]] = {job: [] for job in jobs}
    for r in range(repeats):
        for job in jobs[r % len(jobs):] + jobs[:r % len(jobs)]:
            samples[job] += _timed_steps(*runs[job], precision, device, window)
        if on_step is not None:
            on_step((r + 1) / repeats)
    return [ProxyTiming(layers=depth, micro_batch=b, seq_len=s,
                        forward_backward_s=min(fb for fb, _ in samples[(depth, (b, s))]),
                        optimizer_s=min(o for _, o in samples[(depth, (b, s))]),
                        repeats=len(samples[(depth, (b, s))]),
                        **memory[(depth, (b, s))])
            for depth, (b, s) in jobs]


def _memory_pass(p: Proxy, opt: Any, ids: Any, precision: str, device: str) -> dict[str, int]:
    """Peak statistics of one step (CUDA; zeros on the CPU, where MemTracker measures)."""
    if device != 'cuda':
        return {}
    import torch

    torch.cuda.reset_peak_memory_stats()
    train_step(p, opt, ids, precision, device)
    sync(device)
    stats = torch.cuda.memory_stats()
    return {'peak_allocated_bytes': int(torch.cuda.max_memory_allocated()),
            'peak_reserved_bytes': int(torch.cuda.max_memory_reserved()),
            'num_alloc_retries': int(stats.get('num_alloc_retries', 0)),
            'num_ooms': int(stats.get('num_ooms', 0))}


def fake_peak_bytes(spec: ModelSpec, layers: int, micro_batch: int, seq_len: int, *,
                    precision: str, attention: str) -> int:
    """Peak live tensor bytes of two training steps, measured without allocating.
     ``MemTracker`` (torch/distributed/_tools/mem_tracker.py) under ``FakeTensorMode`` on
the CPU: model, optimizer and inputs are built inside fake mode; ``reset_mod_stats()``
before each forward
    (MemTracker refuses a second one otherwise); the second step has the optimizer state.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        p = build_proxy(spec, layers, seq_len=seq_len, attention=attention, precision=precision)
        opt = make_optimizer(p)
        ids = random_batch(p, micro_batch, seq_len)
        tracker = MemTracker()
        tracker.track_external(p.modules, opt, ids)
        with tracker:
            for _ in range(2):
                tracker.reset_mod_stats()
                train_step(p, opt, ids, precision, 'cpu')
    snapshot = tracker.get_tracker_snapshot('peak')
    return int(sum(int(dev.get('Total', 0)) for dev in snapshot.values()))


