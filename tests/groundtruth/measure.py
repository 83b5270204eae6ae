"""Measure the exact training-step memory peak of a reference model, without allocating.

With PyTorch's MemTracker (torch/distributed/_tools/mem_tracker.py): build the model,
optimizer and inputs inside ``FakeTensorMode`` on the CPU device, register them with
``MemTracker.track_external``, run two training iterations (the first creates the optimizer
state; ``reset_mod_stats()`` before every forward after the first, which MemTracker requires
and which keeps the running total and the peak), and read ``get_tracker_snapshot('peak')``.
That snapshot is the per-category breakdown taken at the moment the tracked total was
highest (a deep copy of the running snapshot whenever the total sets a new maximum), so its
categories add up to its ``Total``: the simultaneous peak, the analogue of
``torch.cuda.max_memory_allocated`` (tensor bytes only, no 512-B rounding on CPU, no
allocator cache, context or workspaces).

A second, independent counter (:class:`LiveBytes`, a ``TorchDispatchMode`` with a weak
reference per storage) runs alongside and labels every moment with the phase it is in, so
the measurement says where the peak happens and what is live at notable moments.
:func:`measure_real_cpu_peak` checks both against a real (allocating) CPU run through the
profiler's allocator events (equal within tens of bytes of wrapped 0-d scalars, plus the
5,056-B CPU RNG state that non-reentrant checkpointing stashes, host memory on a GPU).

Mixed precision runs CPU autocast with CUDA's fp32 op policy on top
(:class:`CudaAutocastPolicy`), so the dtypes, and the bytes, are those of a CUDA run.
What CUDA does differently and cannot be seen here: its SDPA kernels (flash / efficient
keep dropout in-kernel; on CPU, attention dropout falls back to the math path), cuBLAS
workspaces, the caching allocator's 512-B rounding and fragmentation, the CUDA context.

Usage::

    from tests.groundtruth.measure import measure_training_peak
    m = measure_training_peak(spec, seq_len=128, micro_batch=4, precision='amp-bf16',
                              attention='sdpa', checkpointing=True)
    m.peak_bytes, m.peak_by_category, m.peak_phase, m.phases

``python -m tests.groundtruth.measure`` prints a demonstration table.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed._tools.mod_tracker import ModTracker
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only
from torch.utils.weak import WeakIdKeyDictionary

from planner.memory.recipes import RECIPES
from planner.memory.training import LoraSpec
from planner.models.spec import ModelSpec
from tests.groundtruth.reference_models import (
    AttentionImpl,
    CausalLM,
    Style,
    TanhGelu,
    build_model,
)

Precision = Literal['fp32', 'amp-bf16', 'bf16']
AutocastPolicy = Literal['cuda', 'cpu']
OptimizerName = Literal['adamw', 'adam', 'sgd', 'sgd-momentum']

PRECISIONS: tuple[str, ...] = ('fp32', 'amp-bf16', 'bf16')
AUTOCAST_POLICIES: tuple[str, ...] = ('cuda', 'cpu')
OPTIMIZERS: tuple[str, ...] = ('adamw', 'adam', 'sgd', 'sgd-momentum')
CATEGORIES: tuple[str, ...] = ('PARAM', 'BUFFER', 'GRAD', 'ACT', 'TEMP', 'OPT', 'OTH')
PHASES: tuple[str, ...] = ('forward', 'backward', 'optimizer', 'zero_grad')
ITERATIONS = 2  # the first has no optimizer state yet; the second is the steady state


@dataclass(frozen=True)
class Measurement:
    """The memory of one training configuration, in bytes of live tensor storage.

    Attributes:
        peak_bytes: the highest total of live tracked tensor bytes over both iterations
            (MemTracker's peak; comparable to ``torch.cuda.max_memory_allocated``).
        peak_by_category: PARAM, BUFFER, GRAD, ACT, TEMP, OPT, OTH at that moment; they
            sum to ``peak_bytes``. ACT is what the forward created (and recomputation
            under checkpointing), TEMP what the backward created and has not yet handed
            to a parameter's ``.grad``, OTH the input ids and labels. MemTracker may
            misattribute between ACT and TEMP while checkpointed layers recompute
            (its docstring says so); the total is exact.
        peak_phase: ``'forward'`` (model forward and loss), ``'backward'``,
            ``'optimizer'`` (``step()``) or ``'zero_grad'``.
        peak_iteration: 0 (the first step, which creates the optimizer state) or 1.
        peak_module: the latest module event before the peak, with ``ModTracker``'s
            names: ``'backward CausalLM'`` is the start of backward (the loss's
            cross-entropy and upcast backward, before the head's),
            ``'after backward CausalLM.layers.0.mlp.down_proj'`` a point inside a
            layer's backward, ``'recompute ...'`` a checkpointed layer re-running its
            forward; in the optimizer phase it is just the last event of the backward.
        phases: total live bytes at moments of the steady-state iteration: ``start``,
            ``after_forward`` (loss computed, logits dropped, as the HF Trainer does),
            ``after_backward``, ``after_step``, ``after_zero_grad`` (all for the last
            micro-step when accumulating); the maxima within each phase of that
            iteration, ``peak_forward``, ``peak_backward``, ``peak_optimizer``; and
            ``first_iteration_peak``.
        param_bytes, buffer_bytes, input_bytes: storage of the parameters, buffers and
            the input ids + labels of all micro-batches.
        optimizer_state_bytes: optimizer state after a step (steady state).
        crosscheck_peak_bytes: the peak seen by the independent :class:`LiveBytes`
            counter; equals ``peak_bytes`` unless something is wrong.
        settings: the arguments the measurement was taken with.
        seconds: wall time of the measurement.
    """

    peak_bytes: int
    peak_by_category: dict[str, int]
    peak_phase: str
    peak_iteration: int
    peak_module: str
    phases: dict[str, int]
    param_bytes: int
    buffer_bytes: int
    input_bytes: int
    optimizer_state_bytes: int
    crosscheck_peak_bytes: int
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def activation_bytes_at_peak(self) -> int:
        """ACT + TEMP at the peak: everything that is neither state nor input."""
        return self.peak_by_category['ACT'] + self.peak_by_category['TEMP']


# ---- an independent live-bytes counter ------------------------------------------------------
def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    try:
        return [t.untyped_storage()]
    except (RuntimeError, NotImplementedError):  # sparse, nested...: not used here
        return []


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of live tensor storages created by ops, with a phase label.

    Every storage an op returns is recorded once, with a weak reference whose callback
    subtracts its bytes when the storage is freed; a storage seen again with a new size
    is adjusted. ``register`` adds tensors that exist before counting starts. Written
    independently of MemTracker to check it, and to attribute the peak to a phase.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.live = 0
        self.peak = 0
        self.peak_label: tuple[int, str] = (-1, 'setup')
        self.label: tuple[int, str] = (-1, 'setup')
        self.label_peaks: dict[tuple[int, str], int] = {}
        self.where: Callable[[], str] | None = None  # says where a new peak happens
        self.peak_where = ''

    def _free(self, box: list[int], _ref: weakref.ref) -> None:
        self.live -= box[0]

    def _see(self, t: torch.Tensor) -> None:
        for st in _storages(t):
            nbytes = st.nbytes()
            entry = self._sizes.get(st)
            if entry is None:
                box = [nbytes]
                self._sizes[st] = (box, weakref.ref(st, lambda r, b=box: self._free(b, r)))
                self.live += nbytes
            elif entry[0][0] != nbytes:
                self.live += nbytes - entry[0][0]
                entry[0][0] = nbytes

    def _update_peak(self) -> None:
        # A later iteration that only repeats the first one's peak takes the label:
        # the steady state is what gets reported.
        if self.live > self.peak or (self.live == self.peak
                                     and self.label[0] > self.peak_label[0]):
            self.peak = self.live
            self.peak_label = self.label
            if self.where is not None:
                self.peak_where = self.where()
        if self.live > self.label_peaks.get(self.label, -1):
            self.label_peaks[self.label] = self.live

    def register(self, *objs: Any) -> None:
        """Count tensors (and modules' parameters and buffers) that already exist."""
        for obj in tree_flatten(objs)[0]:
            if isinstance(obj, torch.nn.Module):
                for t in (*obj.parameters(), *obj.buffers()):
                    self._see(t)
            elif isinstance(obj, torch.Tensor):
                self._see(obj)
        self._update_peak()

    def set_label(self, iteration: int, phase: str) -> None:
        """Label what follows; the current total counts towards the new label too."""
        self.label = (iteration, phase)
        self._update_peak()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._see(t)
        self._update_peak()
        return out


class _ModuleEvents(ModTracker):
    """Remembers the latest module event: forward, recompute, backward start or end.

    The latest event says where the program is more reliably than the set of active
    modules, which goes stale when checkpoint recomputation stops early (no post-forward
    hook runs) and misses the loss, which is no module.
    """

    def __init__(self) -> None:
        super().__init__()
        self.event = 'start'
        self.register_user_hooks(
            lambda mod, _in: self._mark('recompute' if self.is_bw else 'forward', mod),
            lambda mod, _in, _out: self._mark('after recompute' if self.is_bw
                                              else 'after forward', mod),
            lambda mod, _grads: self._mark('backward', mod),
            lambda mod, _grads: self._mark('after backward', mod))

    def _mark(self, what: str, mod: torch.nn.Module | None) -> None:
        name = self.get_known_fqn(mod) if mod is not None else None
        self.event = f'{what} {name or "?"}'

    def last(self) -> str:
        return self.event


class _NoHook:
    """A removable handle for a hook that was never installed."""

    def remove(self) -> None:
        pass


class _MemTracker(MemTracker):
    """MemTracker that tolerates frozen parameters (a LoRA base).

    MemTracker hooks every parameter's gradient when a module first runs, and
    ``register_hook`` refuses a tensor that does not require grad. A frozen parameter
    never gets a gradient: it is given empty handles, and tracked as a parameter only.
    """

    def _track_module_params_and_buffers(self, module: torch.nn.Module,
                                         install_grad_hooks: bool = True) -> tuple[int, int]:
        if install_grad_hooks:
            for param in module.parameters():
                if (not param.requires_grad
                        and self._param_to_grad_hook_handles.get(param, None) is None):
                    self._param_to_grad_hook_handles[param] = (_NoHook(), _NoHook())
        return super()._track_module_params_and_buffers(module, install_grad_hooks)


# ---- the measurement --------------------------------------------------------------------------
def make_optimizer(name: OptimizerName, params: Any, foreach: bool) -> torch.optim.Optimizer:
    """AdamW / Adam (m and v) or SGD (plain, or with a momentum buffer), ``foreach`` as asked."""
    if name == 'adamw':
        return torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
    if name == 'adam':
        return torch.optim.Adam(params, lr=1e-4, foreach=foreach)
    if name == 'sgd':
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach)
    if name == 'sgd-momentum':
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach)
    raise ValueError(f'unknown optimizer {name!r}; allowed: {", ".join(OPTIMIZERS)}')


def _tensor_bytes(tensors: Any) -> int:
    seen: dict[int, int] = {}
    for t in tree_flatten(tensors)[0]:
        if isinstance(t, torch.Tensor):
            for st in _storages(t):
                seen[id(st)] = st.nbytes()
    return sum(seen.values())


def _optimizer_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values()
            if isinstance(v, torch.Tensor)]


def _check_args(precision: str, optimizer: str, seq_len: int, micro_batch: int,
                grad_accum: int, autocast_policy: str) -> None:
    if autocast_policy not in AUTOCAST_POLICIES:
        raise ValueError(f'unknown autocast_policy {autocast_policy!r}; '
                         f'allowed: {", ".join(AUTOCAST_POLICIES)}')
    if precision not in PRECISIONS:
        raise ValueError(f'unknown precision {precision!r}; allowed: {", ".join(PRECISIONS)}')
    if optimizer not in OPTIMIZERS:
        raise ValueError(f'unknown optimizer {optimizer!r}; allowed: {", ".join(OPTIMIZERS)}')
    for name, value in (('seq_len', seq_len), ('micro_batch', micro_batch),
                        ('grad_accum', grad_accum)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f'{name} must be a positive integer, got {value!r}')


def _model_dtype(precision: Precision, lora: LoraSpec | None) -> torch.dtype:
    """The dtype the model is built in: the recipe's, or under LoRA the frozen base's."""
    if lora is not None:
        frozen = lora.frozen_bytes(RECIPES[precision].act_bytes)
        return torch.bfloat16 if frozen == 2 else torch.float32
    return torch.bfloat16 if precision == 'bf16' else torch.float32


def _setup(spec: ModelSpec, seq_len: int, micro_batch: int, precision: Precision,
           attention: AttentionImpl, checkpointing: bool, optimizer: OptimizerName,
           foreach: bool, grad_accum: int, autocast_policy: AutocastPolicy,
           style: Style | None, fused_qkv: bool | None, tanh_gelu: TanhGelu | None,
           lora: LoraSpec | None = None
           ) -> tuple[CausalLM, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Model, optimizer and the micro-batches, in whatever tensor mode is active."""
    # Pure bf16 builds the model with bf16 as the default dtype, as from_pretrained(
    # torch_dtype=torch.bfloat16) does (``.to()`` cannot swap fake parameters). Under
    # LoRA the base is built in its own dtype and the adapters in fp32.
    dtype = _model_dtype(precision, lora)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = build_model(spec, style=style, attention=attention,
                            checkpointing=checkpointing, fused_qkv=fused_qkv,
                            tanh_gelu=tanh_gelu, lora=lora)
    finally:
        torch.set_default_dtype(previous)
    if precision == 'amp-bf16' and autocast_policy == 'cuda':
        model.checkpoint_context_fn = lambda: (contextlib.nullcontext(), CudaAutocastPolicy())
    if lora is not None and checkpointing:
        _watch_input_leaves(model)
    # The optimizer gets the trainable parameters only, as PEFT models and the HF
    # Trainer give it.
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(optimizer, trainable, foreach)
    batches = []
    for _ in range(grad_accum):
        input_ids = torch.randint(0, spec.vocab_size, (micro_batch, seq_len))
        labels = input_ids.clone()  # the usual causal-LM collator: labels = input ids
        batches.append((input_ids, labels))
    return model, opt, batches


def _watch_input_leaves(model: CausalLM) -> None:
    """Remember the embedding outputs that ``enable_input_require_grads`` makes leaves.

    Such a leaf feeds the decoder layers, and ModTracker (MemTracker's too) hooks every
    module input's gradient with ``register_multi_grad_hook``, whose closure holds the
    input's ``grad_fn`` and is held by that node in turn: a cycle through C++ that
    garbage collection cannot break. The graph's nodes leak (harmless: backward freed
    what they saved), but one of them reaches the leaf's grad accumulator, which holds
    the leaf, so the leaf and its ``.grad`` would outlive the step, which they do not
    in a run without the trackers. :func:`_release_input_leaves` frees both after
    backward.
    """
    leaves: list[weakref.ref] = []
    model.input_leaves = leaves

    def watch(_module: torch.nn.Module, _inputs: Any, output: torch.Tensor) -> None:
        if output.requires_grad and output.is_leaf:
            leaves.append(weakref.ref(output))

    model.embed_tokens.register_forward_hook(watch)


def _release_input_leaves(model: CausalLM) -> None:
    """Free the storage of the leaves :func:`_watch_input_leaves` saw, and their grads."""
    leaves = getattr(model, 'input_leaves', None)
    if not leaves:
        return
    for ref in leaves:
        leaf = ref()
        if leaf is not None:
            leaf.grad = None
            leaf.data = torch.empty(0, dtype=leaf.dtype, device=leaf.device)
    leaves.clear()


# ---- autocast as CUDA does it ---------------------------------------------------------------
def _cuda_fp32_functions() -> frozenset:
    """Functions CUDA autocast runs in fp32 and CPU autocast leaves in the input's dtype.

    ``AT_FORALL_FP32`` in ``aten/src/ATen/autocast_mode.h`` applies to CUDA (and the other
    GPU backends); CPU autocast has its own, shorter fp32 list (losses, linear algebra,
    FFTs). Of the entries these models can reach, ``pow`` matters: GPT-2's ``gelu_new``
    calls ``torch.pow(x, 3.0)`` on the bf16 ``c_fc`` output, so on CUDA it saves an fp32
    copy of x and everything downstream of it is promoted to fp32. The norms and
    ``rsqrt`` see fp32 inputs in these models either way; they are listed for safety.
    ``softmax`` and ``log_softmax`` (CUDA's ``fp32_set_opt_dtype`` list: a 16-bit input is
    converted to fp32, then the fp32 kernel runs) matter where scores reach them in
    bf16: GPT-2's eager softmax over a bf16 (LoRA) base; with an fp32 residual stream
    the scores are fp32 already.
    """
    names = ('acos', 'asin', 'cosh', 'erfinv', 'exp', 'expm1', 'log', 'log10', 'log2',
             'log1p', 'reciprocal', 'rsqrt', 'sinh', 'tan', 'pow')
    funcs = {getattr(torch, n) for n in names} | {getattr(torch.Tensor, n) for n in names}
    funcs |= {torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax,
              torch.nn.functional.log_softmax, torch.log_softmax, torch.Tensor.log_softmax}
    funcs |= {torch.Tensor.__pow__, torch.nn.functional.softplus,
              torch.nn.functional.layer_norm, torch.nn.functional.group_norm,
              torch.nn.functional.rms_norm, torch.layer_norm, torch.group_norm,
              torch.rms_norm}
    return frozenset(funcs)


class CudaAutocastPolicy(TorchFunctionMode):
    """Under CPU autocast, run CUDA's fp32-policy functions in fp32, as CUDA autocast would.

    Their low-precision floating tensor arguments are cast to fp32 first (a copy, as
    CUDA's ``cached_cast`` makes), so the op, what it saves for backward and what it
    returns are those of a CUDA autocast run. Ops in both devices' lower-precision lists
    (``mm``, ``addmm``, ``linear``, ``matmul``, ``bmm``, SDPA) need nothing. Inactive when
    autocast is off, so it can stay entered through backward (checkpoint recomputation
    re-enables autocast and must see the same dtypes). The autograd engine does not
    carry torch-function modes into checkpoint recomputation, so :func:`_setup` also
    passes it to ``checkpoint`` as the recompute context.
    """

    _FP32 = _cuda_fp32_functions()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._FP32 and torch.is_autocast_enabled('cpu'):
            args, kwargs = tree_map_only(torch.Tensor, _to_fp32, (args, kwargs))
        return func(*args, **kwargs)


def _to_fp32(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


def _forward_context(precision: Precision) -> contextlib.AbstractContextManager:
    if precision == 'amp-bf16':
        return torch.autocast('cpu', dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _policy_context(precision: Precision, policy: AutocastPolicy
                    ) -> contextlib.AbstractContextManager:
    if precision == 'amp-bf16' and policy == 'cuda':
        return CudaAutocastPolicy()
    return contextlib.nullcontext()


def _train_iteration(model: CausalLM, opt: torch.optim.Optimizer,
                     batches: list[tuple[torch.Tensor, torch.Tensor]], precision: Precision,
                     on_phase: Any, on_moment: Any) -> None:
    """One optimizer step over the micro-batches, like ``transformers.Trainer``.

    The forward returns (loss, logits); only the loss is kept through backward, as
    ``Trainer.compute_loss`` does. ``num_items_in_batch`` is the number of predicted
    tokens over all micro-batches (what the Trainer passes for accumulation).
    """
    num_items = sum(labels.shape[0] * (labels.shape[1] - 1) for _, labels in batches)
    for input_ids, labels in batches:
        on_phase('forward')
        with _forward_context(precision):
            loss = model(input_ids, labels=labels, num_items_in_batch=num_items).loss
        on_moment('after_forward')
        on_phase('backward')
        loss.backward()
        del loss
        _release_input_leaves(model)
        on_moment('after_backward')
    on_phase('optimizer')
    opt.step()
    on_moment('after_step')
    on_phase('zero_grad')
    opt.zero_grad(set_to_none=True)
    on_moment('after_zero_grad')


def measure_training_peak(spec: ModelSpec, *, seq_len: int, micro_batch: int,
                          precision: Precision = 'fp32', attention: AttentionImpl = 'eager',
                          checkpointing: bool = False, optimizer: OptimizerName = 'adamw',
                          foreach: bool = True, grad_accum: int = 1,
                          autocast_policy: AutocastPolicy = 'cuda',
                          style: Style | None = None, fused_qkv: bool | None = None,
                          tanh_gelu: TanhGelu | None = None,
                          lora: LoraSpec | None = None) -> Measurement:
    """The exact peak of live tensor bytes of two training iterations of ``spec``.

    Args:
        spec: the model shape (see :func:`reference_models.build_model` for styles).
        seq_len, micro_batch: tokens per sequence and sequences per micro-step.
        precision: ``'fp32'``; ``'amp-bf16'`` (fp32 parameters, gradients and optimizer,
            forward and loss under ``torch.autocast('cpu', dtype=torch.bfloat16)``); or
            ``'bf16'`` (parameters, gradients and optimizer state all bf16).
        attention: ``'eager'`` or ``'sdpa'``.
        checkpointing: checkpoint each decoder layer (non-reentrant).
        optimizer: ``'adamw'`` (default), ``'adam'``, ``'sgd'`` or ``'sgd-momentum'``.
        foreach: the multi-tensor optimizer path (torch's default on CUDA).
        grad_accum: micro-steps per optimizer step (gradients accumulate in ``.grad``).
        autocast_policy: with ``'amp-bf16'``: ``'cuda'`` (default) runs the functions
            CUDA autocast keeps in fp32 in fp32 (:class:`CudaAutocastPolicy`), so the
            dtypes are a CUDA run's; ``'cpu'`` is plain CPU autocast.
        style, fused_qkv, tanh_gelu: passed to :func:`build_model`.
        lora: PEFT LoRA on a frozen base (:func:`reference_models.apply_lora`): the base
            in ``lora.frozen_bytes``'s dtype (bf16 for ``base_bits=16``, the recipe's
            compute dtype under a 4-bit base), fp32 adapters, which alone the optimizer
            gets; the precision then says whether the forward runs under autocast.
    """
    _check_args(precision, optimizer, seq_len, micro_batch, grad_accum, autocast_policy)
    started = time.perf_counter()
    settings = {'seq_len': seq_len, 'micro_batch': micro_batch, 'precision': precision,
                'attention': attention, 'checkpointing': checkpointing,
                'optimizer': optimizer, 'foreach': foreach, 'grad_accum': grad_accum,
                'autocast_policy': autocast_policy, 'style': style, 'fused_qkv': fused_qkv,
                'tanh_gelu': tanh_gelu, 'lora': lora}
    gc.collect()
    with FakeTensorMode():
        model, opt, batches = _setup(spec, seq_len, micro_batch, precision, attention,
                                     checkpointing, optimizer, foreach, grad_accum,
                                     autocast_policy, style, fused_qkv, tanh_gelu, lora)
        param_bytes = _tensor_bytes(list(model.parameters()))
        buffer_bytes = _tensor_bytes(list(model.buffers()))
        input_bytes = _tensor_bytes(batches)

        tracker = _MemTracker()
        tracker.track_external(model, opt, batches)
        counter = LiveBytes()
        counter.register(model, batches)
        modules = _ModuleEvents()
        counter.where = modules.last
        moments: dict[str, int] = {}
        iteration = 0

        def on_phase(phase: str) -> None:
            if phase == 'forward':
                # MemTracker refuses a second root forward until its per-module stats
                # are cleared (after the first iteration, and between accumulated
                # micro-steps); the running total and the global peak are kept.
                tracker.reset_mod_stats()
            counter.set_label(iteration, phase)

        def on_moment(name: str) -> None:
            if iteration == ITERATIONS - 1:
                moments[name] = _total(tracker.get_tracker_snapshot('current'))

        with modules, tracker, counter, _policy_context(precision, autocast_policy):
            for iteration in range(ITERATIONS):
                if iteration == ITERATIONS - 1:
                    moments['start'] = _total(tracker.get_tracker_snapshot('current'))
                _train_iteration(model, opt, batches, precision, on_phase, on_moment)
        optimizer_state_bytes = _tensor_bytes(_optimizer_state(opt))

    peak = tracker.get_tracker_snapshot('peak')
    by_category = _categories(peak)
    peak_bytes = _total(peak)
    last = ITERATIONS - 1
    for phase in ('forward', 'backward', 'optimizer'):
        moments[f'peak_{phase}'] = counter.label_peaks.get((last, phase), 0)
    moments['first_iteration_peak'] = max(
        (v for (it, _), v in counter.label_peaks.items() if it == 0), default=0)
    peak_iteration, peak_phase = counter.peak_label
    return Measurement(
        peak_bytes=peak_bytes, peak_by_category=by_category, peak_phase=peak_phase,
        peak_iteration=peak_iteration, peak_module=counter.peak_where, phases=moments,
        param_bytes=param_bytes, buffer_bytes=buffer_bytes, input_bytes=input_bytes,
        optimizer_state_bytes=optimizer_state_bytes, crosscheck_peak_bytes=counter.peak,
        settings=settings, seconds=time.perf_counter() - started)


def _device_snapshot(snapshot: dict) -> dict:
    if not snapshot:
        return {}
    if len(snapshot) != 1:
        raise AssertionError(f'expected one device, got {list(snapshot)}')
    return next(iter(snapshot.values()))


def _total(snapshot: dict) -> int:
    return int(_device_snapshot(snapshot).get('Total', 0))


def _categories(snapshot: dict) -> dict[str, int]:
    dev = _device_snapshot(snapshot)
    by_name = {getattr(k, 'name', str(k)): int(v) for k, v in dev.items()}
    return {c: by_name.get(c, 0) for c in CATEGORIES}


# ---- a real CPU run, through the profiler's allocator events -------------------------------------
def measure_real_cpu_peak(spec: ModelSpec, *, seq_len: int, micro_batch: int,
                          precision: Precision = 'fp32', attention: AttentionImpl = 'eager',
                          checkpointing: bool = False, optimizer: OptimizerName = 'adamw',
                          foreach: bool = True, grad_accum: int = 1,
                          autocast_policy: AutocastPolicy = 'cuda',
                          style: Style | None = None, fused_qkv: bool | None = None,
                          tanh_gelu: TanhGelu | None = None,
                          lora: LoraSpec | None = None) -> int:
    """Peak bytes of the second (steady-state) iteration of a real, allocating CPU run.

    The profiler reports every CPU allocator allocation and free during the iteration
    (``profile_memory=True``); the peak is the bytes live when it starts (parameters,
    buffers, optimizer state and inputs) plus the highest running sum of those events.
    It sees what kernels allocate internally too, so it can only be >= the fake-mode
    peak. Allocates for real: small models only.
    """
    _check_args(precision, optimizer, seq_len, micro_batch, grad_accum, autocast_policy)
    torch.manual_seed(0)
    model, opt, batches = _setup(spec, seq_len, micro_batch, precision, attention,
                                 checkpointing, optimizer, foreach, grad_accum,
                                 autocast_policy, style, fused_qkv, tanh_gelu, lora)
    noop = lambda _name: None  # noqa: E731
    with _policy_context(precision, autocast_policy):
        _train_iteration(model, opt, batches, precision, noop, noop)
        gc.collect()
        baseline = _tensor_bytes([list(model.parameters()), list(model.buffers()),
                                  _optimizer_state(opt), batches])
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=True) as prof:
            _train_iteration(model, opt, batches, precision, noop, noop)
    return baseline + _max_running_sum(_memory_deltas(prof))


def _memory_deltas(prof: torch.profiler.profile) -> Iterator[tuple[int, int]]:
    """(time, bytes) of every allocator event: positive allocations, negative frees."""
    for event in prof.profiler.kineto_results.events():
        if event.name() == '[memory]' and event.device_type() == torch.autograd.DeviceType.CPU:
            yield event.start_ns(), event.nbytes()


def _max_running_sum(deltas: Iterator[tuple[int, int]]) -> int:
    running = peak = 0
    for _, nbytes in sorted(deltas, key=lambda e: e[0]):
        running += nbytes
        peak = max(peak, running)
    return peak


# ---- demonstration ----------------------------------------------------------------------------
def demo_specs() -> dict[str, ModelSpec]:
    """The GPT-2-style and Llama-style (GQA) shapes of the demonstration table."""
    gpt2 = ModelSpec(name='gpt2-tiny', num_layers=4, hidden_size=256, num_heads=4,
                     num_kv_heads=4, head_dim=64, ffn_size=1024, vocab_size=1024,
                     gated_mlp=False, activation='gelu_tanh', tied_embeddings=True,
                     position_embedding='learned', max_position_embeddings=128,
                     norm='layernorm', qkv_bias=True, attn_out_bias=True, mlp_bias=True,
                     attention_dropout=0.1, hidden_dropout=0.1)
    llama = ModelSpec(name='llama-tiny', num_layers=4, hidden_size=256, num_heads=8,
                      num_kv_heads=2, head_dim=32, ffn_size=688, vocab_size=1024,
                      max_position_embeddings=128)
    return {'gpt2-tiny': gpt2, 'llama-tiny': llama}


def _mb(n: int) -> str:
    return f'{n / 1e6:9.3f}'


def main(argv: list[str] | None = None) -> None:
    """Print peaks for a few configurations of the demonstration shapes."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seq-len', type=int, default=128)
    parser.add_argument('--micro-batch', type=int, nargs='+', default=[1, 8])
    parser.add_argument('--precision', nargs='+', default=['fp32', 'amp-bf16'])
    args = parser.parse_args(argv)
    print(f'{"model":12} {"attn":5} {"ckpt":4} {"prec":8} {"b":>3} {"peak MB":>9} '
          + ' '.join(f'{c:>8}' for c in CATEGORIES) + '  phase')
    for name, spec in demo_specs().items():
        for attention in ('eager', 'sdpa'):
            for ckpt in (False, True):
                for precision in args.precision:
                    for b in args.micro_batch:
                        m = measure_training_peak(spec, seq_len=args.seq_len, micro_batch=b,
                                                  precision=precision, attention=attention,
                                                  checkpointing=ckpt)
                        cats = ' '.join(f'{m.peak_by_category[c] / 1e6:8.3f}'
                                        for c in CATEGORIES)
                        print(f'{name:12} {attention:5} {ckpt!s:4} {precision:8} {b:3d} '
                              f'{_mb(m.peak_bytes)} {cats}  {m.peak_phase}')


if __name__ == '__main__':
    main()
