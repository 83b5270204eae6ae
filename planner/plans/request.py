"""What a plan search is asked: the model, the cluster, the target batch and the limits.

:class:`PlanRequest` is the one frozen, validated input of :func:`planner.plans.search.search`
(one documented object whose fields carry units; :mod:`planner.plans.path` builds it).
:class:`LayoutLimits` constrains the layouts the search may propose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner import limits
from planner.defaults import (
    DEFAULT_ATTENTION,
    DEFAULT_MARGIN_FRACTION,
    DEFAULT_OPTIMIZER,
    DEFAULT_SORT_KEY,
    DEFAULT_TOP_K,
    RECOMPUTE_MODES,
    SORT_KEYS,
    ZERO_STAGES,
)
from planner.errors import InputError
from planner.hardware.devices import GpuSpec, LinkSpec
from planner.memory.peak import (
    ConfigArrays,
    MemoryArrays,
    MemoryOptions,
    Overheads,
    estimate_arrays,
    tensor_peak_floor,
)
from planner.memory.recipes import OPTIMIZERS, RECIPES
from planner.memory.training import ATTENTION_KINDS, LOOPS, LOSSES, LoraSpec, resolve_loss
from planner.models.spec import ModelSpec
from planner.stacks import STACK_KEYS, STACKS, SWITCHES, Stack
from planner.timing.efficiency import CalibrationProfile
from planner.timing.step_time import (
    LayoutArrays,
    StepTimeArrays,
    StepTimeOptions,
    TrainingLength,
    step_time_arrays,
)


@dataclass(frozen=True)
class LayoutLimits:
    """Constraints on the layouts the search may propose.

    Empty tuples allow every valid value; ``max_*`` of None means no extra cap.

    Attributes:
        max_tp: largest tensor-parallel size (always <= GPUs per node).
        max_pp: largest pipeline size.
        max_cp: largest context-parallel size.
        max_vpp: largest number of virtual stages per pipeline rank.
        max_micro_batch: largest micro-batch.
        tp: only these TP sizes.
        pp: only these PP sizes.
        cp: only these CP sizes.
        vpp: only these virtual-stage counts.
        micro_batch: only these micro-batches.
        gpus: only these GPU counts.
        min_tokens_per_cp_rank: CP only while each rank keeps at least this many tokens
            of a sequence (below ~1k tokens the ring steps are latency-bound and the
            attention blocks too small; the model does not capture that, so it is ruled
            out here).
        uneven_pipeline: allow PP sizes that do not divide the layers, and virtual stages
            that do not divide a rank's (no rank holds more than ``ceil(layers / pp)``;
            the Megatron and torchtitan exports write the split:
            ``planner.export.base.stage_layers``).
        sequence_parallel: use sequence parallelism with TP (Megatron's default).
        max_ep: largest expert-parallel size (MoE models, stacks with EP).
        ep: only these EP sizes.
    """

    max_tp: int | None = None
    max_pp: int | None = None
    max_cp: int | None = None
    max_vpp: int | None = None
    max_micro_batch: int | None = None
    tp: tuple[int, ...] = ()
    pp: tuple[int, ...] = ()
    cp: tuple[int, ...] = ()
    vpp: tuple[int, ...] = ()
    micro_batch: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    min_tokens_per_cp_rank: int = 1024
    uneven_pipeline: bool = False
    sequence_parallel: bool = True
    max_ep: int | None = None
    ep: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ('max_tp', 'max_pp', 'max_cp', 'max_vpp', 'max_micro_batch', 'max_ep'):
            value = getattr(self, name)
            if value is not None:
                limits.check(name, value)
        for name in ('tp', 'pp', 'cp', 'vpp', 'micro_batch', 'gpus', 'ep'):
            values = getattr(self, name)
            if len(values) > 10_000:
                raise InputError(_flag(name), f'{len(values):,} values', 'up to 10,000')
            for x in values:
                if not isinstance(x, (int, np.integer)):
                    raise InputError(_flag(name), f'must be whole numbers, got {x!r}')
                limits.check(name, x)

    def allowed(self, name: str, values: np.ndarray) -> np.ndarray:
        """``values`` filtered by the cap and the allow-list of axis ``name``."""
        cap = getattr(self, f'max_{name}', None)
        if cap is not None:
            values = values[values <= cap]
        only = getattr(self, name)
        if only:
            values = values[np.isin(values, np.asarray(only))]
        return values

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, without the defaults."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value != getattr(_DEFAULT_LIMITS_VALUES, name):
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


_DEFAULT_LIMITS_VALUES = LayoutLimits()


@dataclass(frozen=True)
class PlanMode:
    """One (stack, precision recipe) pair a search scores, with what it may try.

    Attributes:
        stack: the stack's key (``planner.stacks.STACKS``).
        precision: the recipe its candidates train with.
        zero_stages: the ZeRO stages of this mode the request allows.
        recompute_modes: the recompute modes of this stack the request allows.
        hybrid_shard_stages: those of ``zero_stages`` whose FSDP also runs as HSDP.
    """

    stack: str
    precision: str
    zero_stages: tuple[int, ...]
    recompute_modes: tuple[str, ...]
    hybrid_shard_stages: tuple[int, ...] = ()


@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan search needs, validated, with units in the names.

    Give the target global batch as ``global_batch`` (sequences) or
    ``global_batch_tokens`` (tokens; must be a multiple of ``seq_len`` to factorise).

    Attributes:
        model: the transformer to train.
        seq_len: tokens per sequence.
        gpu: the accelerator (memory capacity, peaks, NVLink, price).
        max_nodes: nodes available; the search may use fewer.
        gpus_per_node: GPUs in each node; the search may use fewer.
        inter_node: network between nodes (needed when more than one node is used).
        global_batch: target sequences per optimizer step.
        global_batch_tokens: target tokens per optimizer step, instead.
        length: training data (tokens, or samples x epochs); None ranks by step time.
        zero_stages: ZeRO stages to consider.
        recompute_modes: activation-recompute modes to consider.
        precision: a ``RECIPES`` key overriding the stacks' own recipes ('' : each
            stack's own, per ZeRO mode).
        optimizer: ``OPTIMIZERS`` key.
        attention: ``flash`` or ``eager``.
        framework: the stack (``planner.stacks``) that runs the job: its layouts, ZeRO
            stages, recompute modes, precision, kernels, loss and time defaults. ''
            searches every stack that can run the request and ranks across them.
        loss: ``hf``, ``chunked``, ``vocab-parallel`` (``megatron``) or '' for the
            stack's own. Only a loss the stack's launchers switch on (``Stack.losses``;
            ``chunked``, Liger's, on the model types Liger patches): a named stack that
            cannot run it is refused; with no stack named, only the stacks that run it
            are searched.
        loop: ``keep-outputs`` or ``trainer`` (what the training loop holds of the
            model output; ``planner/memory/model_outputs.py``).
        margin_fraction: fraction of GPU memory kept free.
        price_per_gpu_hour_usd: None for the catalog price of ``gpu``.
        sort_by: ``time`` (time-to-train), ``cost``, ``gpus`` or ``headroom``.
        top_k: candidates to report.
        limits: layout constraints.
        step_options: constants of the step-time model.
        calibration: measured efficiency profile replacing the default curve.
        overheads: memory overheads (None: the estimator's defaults).
        lora: train LoRA adapters on a frozen base (QLoRA: ``base_bits`` 4) instead of
            every weight; None for full training. LoRA runs as PEFT does (HF Trainer,
            accelerate, DeepSpeed, FSDP, LLaMA-Factory): data parallel with ZeRO 0-3
            only, so the search keeps TP = PP = CP = 1 and needs ``framework='hf'``.
        compile: the stack's per-block ``torch.compile`` (torchtitan's ``[compile]``);
            only stacks with that switch are searched.
        async_tp: torchtitan's async tensor parallelism (needs ``compile``).
        overlap_grad_reduce: Megatron's ``--overlap-grad-reduce`` (with
            ``--overlap-param-gather``): the gradient reduce-scatter overlaps the backward
            as DDP's buckets do (``StepTimeOptions().dp_overlap``), where the Megatron stack
            exposes it by default (``batchfit plan --overlap-grad-reduce``); only stacks
            with that switch are searched.
        partition_activations: DeepSpeed's ``activation_checkpointing.partition_activations``:
            a fully recomputed layer keeps its input split over the TP ranks and gathers it
            before recomputing; only stacks with that switch are searched.
        zero_bubble: torchtitan's ``InterleavedZeroBubble`` pipeline schedule on layouts
            with virtual stages (vpp > 1; 1F1B stays where a rank has one stage); only
            stacks with that switch are searched.
        tp_comm_overlap: Megatron's ``--tp-comm-overlap``: Transformer Engine's userbuffers
            hide part of the TP collectives behind the GEMMs
            (``planner.timing.stack_speed.TP_COMM_OVERLAP``) on layouts with TP > 1;
            Megatron asserts sequence parallelism, so the request needs it and some TP
            above 1. Only stacks with that switch are searched.
        grad_reduce_in_bf16: Megatron's ``--grad-reduce-in-bf16`` (Megatron-Bridge's
            ``ddp.grad_reduce_in_fp32 = False``): a bf16 main-grad buffer (2 B/param, not
            4) reduced in bf16, with an fp32 copy of the rank's shard at the optimizer
            step; only stacks with that switch are searched.
    """

    model: ModelSpec
    seq_len: int
    gpu: GpuSpec
    max_nodes: int = 1
    gpus_per_node: int = 8
    inter_node: LinkSpec | None = None
    global_batch: int | None = None
    global_batch_tokens: int | None = None
    length: TrainingLength | None = None
    zero_stages: tuple[int, ...] = ZERO_STAGES
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    precision: str = ''  # each stack's own recipe
    optimizer: str = DEFAULT_OPTIMIZER
    attention: str = DEFAULT_ATTENTION
    framework: str = ''  # every stack that runs the request
    loss: str = ''
    loop: str = LOOPS[0]
    margin_fraction: float = DEFAULT_MARGIN_FRACTION
    price_per_gpu_hour_usd: float | None = None
    sort_by: str = DEFAULT_SORT_KEY
    top_k: int = DEFAULT_TOP_K
    limits: LayoutLimits = field(default_factory=LayoutLimits)
    step_options: StepTimeOptions = field(default_factory=StepTimeOptions)
    calibration: CalibrationProfile | Mapping | None = None
    overheads: Overheads | None = None
    lora: LoraSpec | None = None
    compile: bool = False
    async_tp: bool = False
    overlap_grad_reduce: bool = False
    partition_activations: bool = False
    zero_bubble: bool = False
    tp_comm_overlap: bool = False
    grad_reduce_in_bf16: bool = False

    def __post_init__(self) -> None:
        for name, key in (('seq_len', 'seq_len'), ('max_nodes', 'nodes'),
                          ('gpus_per_node', 'gpus_per_node'), ('top_k', 'top_k')):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise InputError(_flag(key), f'must be a whole number, got {value!r}')
            limits.check(key, value)
        if self.max_nodes * self.gpus_per_node > limits.MAX_GPUS:
            raise InputError('--nodes', f'{self.max_nodes:,} x {self.gpus_per_node:,} = '
                             f'{self.max_nodes * self.gpus_per_node:,} GPUs',
                             f'at most {limits.MAX_GPUS:,} GPUs in all (docs/limits.md)')
        if (self.global_batch is None) == (self.global_batch_tokens is None):
            raise InputError('--global-batch', 'give exactly one of --global-batch (sequences) '
                             'and --global-batch-tokens')
        for name in ('global_batch', 'global_batch_tokens'):
            value = getattr(self, name)
            if value is not None:
                if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                    raise InputError(_flag(name), f'must be a whole number, got {value!r}')
                limits.check(name, value)
        if not self.zero_stages or any(z not in ZERO_STAGES for z in self.zero_stages):
            raise InputError('--zero', f'got {self.zero_stages!r}',
                             'a list from ' + ', '.join(map(str, ZERO_STAGES)))
        if not self.recompute_modes or any(r not in RECOMPUTE_MODES
                                           for r in self.recompute_modes):
            raise InputError('--recompute', f'got {self.recompute_modes!r}',
                             'a list from ' + ', '.join(RECOMPUTE_MODES))
        choices = {'precision': ('', *RECIPES), 'optimizer': tuple(OPTIMIZERS),
                   'attention': ATTENTION_KINDS, 'framework': ('', *STACK_KEYS),
                   'sort_by': SORT_KEYS, 'loss': LOSSES, 'loop': LOOPS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise InputError(_flag('sort' if name == 'sort_by' else name),
                                 f'unknown value {getattr(self, name)!r}',
                                 ', '.join(a for a in allowed if a))
        limits.check('margin', self.margin_fraction)
        if self.price_per_gpu_hour_usd is not None:
            limits.check('price', self.price_per_gpu_hour_usd)
        if self.max_nodes > 1 and self.inter_node is None:
            raise InputError('--inter-node', 'more than one node needs the network between '
                             'them (batchfit gpus --catalog lists them)')
        for name in SWITCHES:
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise InputError(_flag(name), f'must be true or false, got '
                                 f'{getattr(self, name)!r}')
        if self.async_tp and not self.compile:
            # torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp raises
            raise InputError('--async-tp', 'async TP needs --compile (torchtitan refuses it '
                             'without the model compiled)', '--compile --async-tp, or off')
        if self.zero_bubble and self.compile:
            # torch/distributed/pipelining/schedules.py _check_torch_compile_compatibility
            raise InputError('--zero-bubble', 'torch builds its zero-bubble schedules only '
                             'without torch.compile', 'off, or no --compile')
        self._check_lora()
        self._check_stacks()
        if self.tp_comm_overlap:
            self._check_tp_comm_overlap()

    def _check_tp_comm_overlap(self) -> None:
        """Megatron overlaps TP communication only with sequence parallelism, which it
        turns off at TP 1 (megatron/training/arguments.py: "Tensor parallel
        communication/GEMM overlap can happen only when sequence parallelism is
        enabled")."""
        if not self.limits.sequence_parallel:
            raise InputError('--tp-comm-overlap', 'Megatron overlaps TP communication only '
                             'with sequence parallelism (--no-sp turns it off)',
                             'off, or without --no-sp')
        wider = self.limits.allowed('tp', np.arange(2, self.gpus_per_node + 1))
        if not wider.size:
            raise InputError('--tp-comm-overlap', 'it needs TP > 1 (Megatron turns sequence '
                             'parallelism off at TP 1, then refuses the overlap)',
                             'off, or allow --tp above 1')

    @property
    def options(self) -> tuple[str, ...]:
        """The stack switches this request turns on (``Stack.options`` words)."""
        return tuple(name for name in SWITCHES if getattr(self, name))

    def _check_stacks(self) -> None:
        """A named stack must run the overrides; with none, some stack must."""
        lora = self.lora is not None
        model_type = self.model.hf_model_type
        if self.framework:
            stack = STACKS[self.framework]
            having = {f'{o}_allowed': 'off, or a stack that has it: ' + ', '.join(
                s.key for s in STACKS.values() if o in s.options) for o in self.options}
            stack.check(precision=self.precision, zero_stages=tuple(self.zero_stages),
                        recompute_modes=tuple(self.recompute_modes), lora=lora,
                        options=self.options, loss=self.loss, model_type=model_type,
                        field_names=having)
            runs = {'tp': stack.tensor_parallel, 'pp': stack.pipeline_parallel,
                    'cp': stack.context_parallel, 'vpp': stack.virtual_stages,
                    'ep': stack.expert_parallel}
            for axis, runs_it in runs.items():
                if not runs_it and not self.limits.allowed(axis, np.ones(1, int)).size:
                    raise InputError(_flag(axis), f'the {stack.key} stack does not run '
                                     f'{axis} > 1', '1')
        elif self.loss and not any(s.runs_loss(self.loss, model_type)
                                   for s in STACKS.values()):
            # every stack with this loss refuses the model (Liger's model types): say why
            next(s for s in STACKS.values() if self.loss in s.losses).check(
                loss=self.loss, model_type=model_type)
        if not self.plan_modes():
            wanted = [f'--precision {self.precision}'] if self.precision else []
            wanted += [_flag(o) for o in self.options]
            wanted += [f'--loss {self.loss}'] if self.loss else []
            wanted += [f'--zero {",".join(map(str, self.zero_stages))}',
                       f'--recompute {",".join(self.recompute_modes)}']
            raise InputError('--framework', 'no stack runs ' + ' with '.join(wanted),
                             '; '.join(f'{s.key}: precision {"/".join(s.precisions)}, ZeRO '
                                       f'{",".join(map(str, s.zero_stages))}'
                                       + (f', loss {"/".join(s.losses)}' if self.loss else '')
                                       for s in STACKS.values()))

    def stacks(self) -> tuple[Stack, ...]:
        """The stacks this request searches: the named one, or every one that can run it."""
        if self.framework:
            return (STACKS[self.framework],)
        lora = self.lora is not None
        return tuple(s for s in STACKS.values()
                     if (s.lora_modes or not lora)
                     and (not self.precision or s.runs_precision(self.precision))
                     and set(self.options) <= set(s.options)
                     and s.runs_loss(self.loss, self.model.hf_model_type))

    def plan_modes(self) -> tuple[PlanMode, ...]:
        """Every (stack, recipe) the search scores, with the ZeRO stages and recompute
        modes of each that the request allows (the layout codes index this tuple)."""
        out = []
        int8 = self.lora is not None and self.lora.base_bits == 8
        for stack in self.stacks():
            recompute = tuple(r for r in RECOMPUTE_MODES
                              if r in stack.recompute and r in self.recompute_modes)
            if not recompute:
                continue
            for mode in stack.modes_for(self.lora is not None, self.precision):
                zeros = tuple(z for z in mode.zero_stages
                              if z in self.zero_stages and not (int8 and z == 3))
                hybrid = tuple(z for z in zeros if mode.hybrid_shard and z >= 2)
                if zeros:
                    out.append(PlanMode(stack.key, mode.precision, zeros, recompute, hybrid))
        # one entry per (stack, recipe): modes that share both are scored together
        merged: dict[tuple[str, str], PlanMode] = {}
        for m in out:
            key = (m.stack, m.precision)
            if key in merged:
                prev = merged[key]
                m = PlanMode(m.stack, m.precision,
                             tuple(sorted({*prev.zero_stages, *m.zero_stages})), m.recompute_modes,
                             tuple(sorted({*prev.hybrid_shard_stages, *m.hybrid_shard_stages})))
            merged[key] = m
        return tuple(merged.values())

    def for_stack(self, framework: str, precision: str) -> PlanRequest:
        """This request with the stack and recipe fixed (a candidate's own request)."""
        from dataclasses import replace

        stack = STACKS[framework]
        zeros = tuple(z for z in self.zero_stages if z in stack.zero_stages) or self.zero_stages
        recompute = tuple(r for r in self.recompute_modes if r in stack.recompute) \
            or self.recompute_modes
        return replace(self, framework=framework, precision=precision, zero_stages=zeros,
                       recompute_modes=recompute,
                       compile=self.compile and 'compile' in stack.options,
                       async_tp=self.async_tp and 'async_tp' in stack.options,
                       zero_bubble=self.zero_bubble and 'zero_bubble' in stack.options,
                       tp_comm_overlap=self.tp_comm_overlap
                       and 'tp_comm_overlap' in stack.options,
                       grad_reduce_in_bf16=self.grad_reduce_in_bf16
                       and 'grad_reduce_in_bf16' in stack.options)

    def _check_lora(self) -> None:
        """LoRA runs under PEFT on Hugging Face models, data parallel only.

        The memory model counts LoRA for the ``hf`` framework only (Megatron has no
        PEFT), and PEFT composes with DDP, ZeRO and FSDP but not with TP, PP or CP.
        """
        if self.lora is None:
            return
        if not isinstance(self.lora, LoraSpec):
            raise InputError('--lora-rank', f'must be a LoraSpec, got {self.lora!r}')
        if self.framework and not STACKS[self.framework].lora_modes:
            raise InputError('--framework', f'LoRA runs under PEFT on Hugging Face models, '
                             f'not {self.framework}', 'hf')
        if self.lora.base_bits == 8 and set(self.zero_stages) == {3}:
            raise InputError('--zero', 'an LLM.int8 base cannot be sharded by ZeRO-3/FSDP '
                             '(bitsandbytes shards 4-bit weights only)', '0, 1 or 2')
        for axis in ('tp', 'pp', 'cp', 'vpp'):
            if not self.limits.allowed(axis, np.ones(1, int)).size:
                raise InputError(_flag(axis), 'LoRA runs data parallel only (PEFT with DDP, '
                                 'ZeRO or FSDP): no model split', '1')

    @property
    def target_batch_samples(self) -> float:
        """The target global batch in sequences (fractional when tokens do not divide)."""
        if self.global_batch is not None:
            return float(self.global_batch)
        return self.global_batch_tokens / self.seq_len  # type: ignore[operator]

    @property
    def price(self) -> float:
        """USD per GPU-hour: the request's, else the catalog's."""
        if self.price_per_gpu_hour_usd is not None:
            return self.price_per_gpu_hour_usd
        return self.gpu.price_per_gpu_hour_usd

    @property
    def loss_kind(self) -> str:
        """The loss implementation whose buffers are counted ('' : each stack's own)."""
        return resolve_loss(self.loss, STACKS[self.framework].loss if self.framework else '')

    @property
    def usable_bytes(self) -> float:
        """Per-GPU memory a plan may take: the capacity less the margin."""
        return self.gpu.memory_bytes * (1 - self.margin_fraction)

    def memory_options(self, mode: int = 0) -> MemoryOptions:
        """The memory model's choices shared by every layout of ``plan_modes()[mode]``."""
        m = self.plan_modes()[mode]
        return MemoryOptions(precision=m.precision, optimizer=self.optimizer,
                             attention=self.attention, framework=m.stack,
                             loss=resolve_loss(self.loss, STACKS[m.stack].loss), lora=self.lora,
                             loop=self.loop, partition_activations=self._switch_on(
                                 'partition_activations', m.stack),
                             zero_bubble=self._switch_on('zero_bubble', m.stack),
                             grad_reduce_in_bf16=self._switch_on('grad_reduce_in_bf16',
                                                                 m.stack))

    def memory_arrays(self, layout: LayoutArrays, parts: bool = False) -> MemoryArrays:
        """The memory model on ``layout``'s candidates, each with its own stack and recipe
        (one vectorised call per mode present)."""
        return _per_mode(layout, lambda k, lay: estimate_arrays(
            self.model, self.memory_options(k), self.memory_config(lay), self.overheads,
            parts=parts), MemoryArrays.concatenate)

    def memory_floor(self, layout: LayoutArrays) -> np.ndarray:
        """``tensor_peak_floor`` of every candidate, with its own stack and recipe."""
        return _per_mode(layout, lambda k, lay: np.broadcast_to(tensor_peak_floor(
            self.model, self.memory_options(k), self.memory_config(lay)), (len(lay),)),
            np.concatenate)

    def memory_config(self, layout: LayoutArrays) -> ConfigArrays:
        """The memory model's axes for ``layout``'s candidates.

        What every candidate shares (sequence length, no offload, the sequence-parallel
        flag of one stack's rows) stays 0-d, so the estimate does not carry it along as a
        full column.
        """
        sp = np.asarray(layout.sequence_parallel, bool)
        if sp.size and bool(np.all(sp == sp.flat[0])):
            sp = np.asarray(sp.flat[0])  # one stack's rows: its SP, or none (DeepSpeed)
        return ConfigArrays(
            seq_len=np.asarray(self.seq_len), micro_batch=layout.micro_batch,
            grad_accum=layout.grad_accum, tp=layout.tp, pp=layout.pp, vpp=layout.vpp,
            cp=layout.cp, ep=np.asarray(layout.ep), dp=layout.dp, zero=layout.zero,
            offload=np.asarray(0), recompute=layout.recompute,
            sequence_parallel=sp,
            etp=np.asarray(layout.etp), dp_replicate=np.asarray(layout.dp_replicate))

    def step_options_for(self, framework: str) -> StepTimeOptions:
        """The step-time constants for a stack: its default DP overlap unless the request
        (a calibration) set another."""
        from dataclasses import replace

        from planner.timing.stack_speed import with_switches

        options = self.step_options
        if (options.dp_overlap == StepTimeOptions().dp_overlap
                and not self._switch_on('overlap_grad_reduce', framework)):
            options = replace(options, dp_overlap=STACKS[framework].dp_overlap)
        return with_switches(options, compile=self._switch_on('compile', framework),
                             async_tp=self._switch_on('async_tp', framework),
                             tp_comm_overlap=self._switch_on('tp_comm_overlap', framework))

    def _switch_on(self, name: str, framework: str) -> bool:
        """Whether the switch ``name`` is asked for and ``framework``'s stack has it."""
        return bool(getattr(self, name)) and name in STACKS[framework].options

    def step_times(self, layout: LayoutArrays) -> StepTimeArrays:
        """The step-time model on ``layout``'s candidates, each with its stack's choices."""
        def one(k: int, lay: LayoutArrays) -> StepTimeArrays:
            m = self.plan_modes()[k]
            st = step_time_arrays(self.model, self.seq_len, self.gpu, self.inter_node, lay,
                                  precision=m.precision, optimizer=self.optimizer,
                                  attention=self.attention, framework=m.stack,
                                  options=self.step_options_for(m.stack),
                                  calibration=self.calibration, lora=self.lora,
                                  loss=self.loss,
                                  partition_activations=self._switch_on(
                                      'partition_activations', m.stack),
                                  zero_bubble=self._switch_on('zero_bubble', m.stack),
                                  grad_reduce_in_bf16=self._switch_on('grad_reduce_in_bf16',
                                                                      m.stack))
            return StepTimeArrays.concatenate([st]) if np.ndim(lay.tp) else st
        return _per_mode(layout, one, StepTimeArrays.concatenate)

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON (the ``request`` member of ``plan --json``)."""
        return {
            'model': self.model.name, 'parameters': self.model.total_params(),
            'seq_len': self.seq_len, 'gpu': self.gpu.key, 'max_nodes': self.max_nodes,
            'gpus_per_node': self.gpus_per_node,
            'inter_node': None if self.inter_node is None else self.inter_node.key,
            'global_batch': self.global_batch, 'global_batch_tokens': self.global_batch_tokens,
            'length': None if self.length is None else self.length.to_dict(),
            'zero_stages': list(self.zero_stages), 'recompute_modes': list(self.recompute_modes),
            'precision': self.precision, 'optimizer': self.optimizer,
            'attention': self.attention, 'framework': self.framework, 'loss': self.loss_kind,
            'stacks': [s.key for s in self.stacks()],
            'loop': self.loop, 'margin_fraction': self.margin_fraction,
            'price_per_gpu_hour_usd': self.price, 'sort_by': self.sort_by, 'top_k': self.top_k,
            'limits': self.limits.to_dict(),
            'calibration': None if self.calibration is None else 'given',
            'lora': None if self.lora is None else lora_dict(self.lora, self.model),
            'compile': self.compile, 'async_tp': self.async_tp,
            'overlap_grad_reduce': self.overlap_grad_reduce,
            'partition_activations': self.partition_activations,
            'zero_bubble': self.zero_bubble,
            'tp_comm_overlap': self.tp_comm_overlap,
            'grad_reduce_in_bf16': self.grad_reduce_in_bf16,
        }


def _per_mode(layout: LayoutArrays, compute, concatenate):
    """``compute(mode, rows)`` for each plan mode present in ``layout``, put back in
    ``layout``'s order (one call when a single mode is present)."""
    codes = np.asarray(layout.mode)
    if codes.ndim == 0 or codes.size == 0 or bool(np.all(codes == codes.flat[0])):
        return compute(int(codes.flat[0]) if codes.size else 0, layout)
    if np.all(codes[1:] >= codes[:-1]):
        # the search's grids are in mode order: contiguous slices (views), no reordering
        present = codes[np.flatnonzero(np.diff(codes, prepend=-1))]
        bounds = [*np.searchsorted(codes, present), codes.size]
        return concatenate([compute(int(k), layout.take(slice(a, b)))
                            for k, a, b in zip(present, bounds[:-1], bounds[1:], strict=True)])
    # not np.unique: its masked-array check imports numpy.ma (20 ms of the app's start)
    present = np.flatnonzero(np.bincount(codes.ravel()))
    groups = [np.flatnonzero(codes == k) for k in present]
    parts = [compute(int(k), layout.take(rows)) for k, rows in zip(present, groups, strict=True)]
    joined = concatenate(parts)
    order = np.empty(len(layout), np.intp)
    order[np.concatenate(groups)] = np.arange(len(layout))
    if isinstance(joined, np.ndarray):
        return joined[order]
    return joined.take(order)


def lora_dict(lora: LoraSpec, model: ModelSpec) -> dict[str, Any]:
    """The LoRA settings as JSON, with the trainable (adapter) parameters they give."""
    from planner.memory.model_states import lora_params

    return {**lora.to_dict(), 'trainable_parameters': lora_params(model, lora)}


def _flag(name: str) -> str:
    return '--' + name.replace('_', '-')
