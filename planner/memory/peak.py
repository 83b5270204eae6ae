"""Per-GPU peak training memory, vectorised over configurations.

The peak is the largest total of live tensors over the phases of a step, never
one sum of everything (torch.distributed._tools.mem_tracker reports the same phases):

* ``forward_end``: model states, activations of every in-flight micro-batch,
  autocast weight copies, and the loss being computed;
* ``backward_start``: the same with the loss's backward buffers, or the top
  layer's backward temporaries;
* ``backward_end``: activations released, the full gradient buffer written;
* ``optimizer_step``: weights, gradients, states and the step's temporaries.

:func:`estimate_arrays` scores many configurations at once (numpy broadcasting over
:class:`ConfigArrays`); :func:`estimate` is the readable single-configuration
wrapper the CLI and the GUI use. Non-tensor overheads (CUDA context, cuBLAS
workspaces, allocator caching) are added on top of the tensor peak as named parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

import numpy as np

from planner.defaults import (
    DEFAULT_ATTENTION,
    DEFAULT_FRAMEWORK,
    DEFAULT_MARGIN_FRACTION,
    DEFAULT_OPTIMIZER,
    DEFAULT_PRECISION,
)
from planner.distinct_rows import DistinctRows, Spread, distinct_rows
from planner.hardware.devices import GpuSpec
from planner.limits import check_figure
from planner.memory.activations import (
    FULL_RECOMPUTE_SHARE,
    RECOMPUTE_CODES,
    EdgeBytes,
    LayerTerms,
    by_recompute_code,
    edge_bytes,
    half_recomputed_layers,
    lora_dequant_bytes,
    lora_first_layer_delta,
    lora_forward_temps,
    lora_norm_saves_input,
    lora_saved_base_casts,
    lora_scores_moment,
)
from planner.memory.cp_attention import cp_ring_bytes, ring_sizes
from planner.memory.model_outputs import model_output_bytes
from planner.memory.model_states import (
    OFFLOAD_CODES,
    ModelStateBytes,
    StageParams,
    expert_tp,
    hf_uncast_expert_matmul,
    model_state_bytes,
    stage_params,
)
from planner.memory.recipes import (
    OPTIMIZERS,
    RECIPES,
    OptimizerKind,
    PrecisionRecipe,
    with_bf16_main_grads,
)
from planner.memory.stack_activations import stack_edge_bytes, stack_layer_terms
from planner.memory.training import LoraSpec, TrainingSetup, check_fits_model
from planner.models.spec import ModelSpec
from planner.stacks import STACKS
from planner.stacks.pipeline_schedule import zero_bubble_inflight

MIB = 2**20
PHASES: tuple[str, ...] = ('forward_end', 'backward_start', 'backward_end', 'optimizer_step')


@dataclass(frozen=True)
class Overheads:
    """Memory outside the tensors a step allocates (calibration replaces the defaults).

    Attributes:
        cuda_context_bytes: driver context, kernels and libraries loaded (outside the
            caching allocator; ~0.3-0.7 GiB with lazy module loading, pytorch #107667).
        workspace_bytes: cuBLAS/cuBLASLt workspaces and NCCL buffers on a
            multi-GPU run.
        allocator_fraction: caching and fragmentation, as a fraction of the tensor
            peak (max_memory_reserved / max_memory_allocated - 1).
    """

    cuda_context_bytes: float = 512 * MIB
    workspace_bytes: float = 64 * MIB
    nccl_bytes: float = 256 * MIB
    allocator_fraction: float = 0.05
    source: str = 'defaults'


def stack_overheads(framework: str) -> Overheads:
    """The default overheads, with the stack's own allocator reserve where it has one
    (``planner.stacks.catalog``: what it was fitted on)."""
    fraction = STACKS[framework].allocator_fraction
    return Overheads() if fraction is None else Overheads(allocator_fraction=fraction,
                                                          source=f'{framework} defaults')


@dataclass(frozen=True)
class MemoryOptions:
    """The categorical choices shared by every configuration of a grid."""

    precision: str = DEFAULT_PRECISION
    optimizer: str = DEFAULT_OPTIMIZER
    attention: str = DEFAULT_ATTENTION
    framework: str = DEFAULT_FRAMEWORK
    loss: str = 'hf'
    lora: LoraSpec | None = None
    foreach: bool = True
    zero3_prefetch_layers: int = 1
    loop: str = 'keep-outputs'  # what the training loop holds (model_outputs.py)
    partition_activations: bool = False  # DeepSpeed: checkpoints split over the TP ranks
    zero_bubble: bool = False  # torchtitan: InterleavedZeroBubble where vpp > 1
    grad_reduce_in_bf16: bool = False  # Megatron: a bf16 main-grad buffer

    @classmethod
    def from_setup(cls, setup: TrainingSetup) -> MemoryOptions:
        """The categorical part of a single configuration."""
        return cls(precision=setup.precision, optimizer=setup.optimizer,
                   attention=setup.attention, framework=setup.framework,
                   loss=setup.loss_kind, lora=setup.lora, foreach=setup.foreach,
                   zero3_prefetch_layers=setup.zero3_prefetch_layers, loop=setup.loop,
                   partition_activations=setup.partition_activations,
                   zero_bubble=setup.zero_bubble,
                   grad_reduce_in_bf16=setup.grad_reduce_in_bf16)


@dataclass
class ConfigArrays:
    """The numeric axes of many configurations, as broadcastable numpy arrays.

    ``recompute`` and ``offload`` hold codes (``RECOMPUTE_CODES``, ``OFFLOAD_CODES``).
    """

    seq_len: np.ndarray
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    zero: np.ndarray
    offload: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray
    # each expert split over etp ranks (0: the TP size, Megatron's default)
    etp: np.ndarray = field(default_factory=lambda: np.zeros((), int))
    # HSDP: copies of the FSDP shard group (1: FSDP shards over all of dp x cp)
    dp_replicate: np.ndarray = field(default_factory=lambda: np.ones((), int))

    @classmethod
    def from_setup(cls, s: TrainingSetup) -> ConfigArrays:
        """One configuration as 0-d arrays."""
        return cls(*(np.asarray(v) for v in (
            s.seq_len, s.micro_batch, s.grad_accum, s.tp, s.pp, s.vpp, s.cp, s.ep, s.dp,
            s.zero, OFFLOAD_CODES[s.offload], RECOMPUTE_CODES[s.recompute],
            s.sequence_parallel, s.etp, s.dp_replicate)))


@dataclass
class MemoryArrays:
    """Bytes per GPU for every configuration of a grid.

    ``components`` are the named parts at the peak phase of the most loaded
    stage; they add up to ``tensor_peak_bytes``. ``phase_bytes`` has the total
    of every phase; ``peak_phase`` indexes ``PHASES``.
    """

    components: dict[str, np.ndarray]
    phase_bytes: dict[str, np.ndarray]
    peak_phase: np.ndarray
    tensor_peak_bytes: np.ndarray
    overhead: dict[str, np.ndarray]
    total_bytes: np.ndarray
    activations_per_layer_bytes: np.ndarray

    def take(self, rows: np.ndarray) -> MemoryArrays:
        """The configurations at ``rows`` of a flat grid, every field a 1-D array.

        Fields the estimate left as broadcast scalars are expanded first.
        """
        n = np.shape(self.total_bytes)

        def pick(value: np.ndarray) -> np.ndarray:
            return np.broadcast_to(value, n)[rows]

        picked: dict[str, Any] = {
            f.name: ({k: pick(v) for k, v in value.items()} if isinstance(value, dict)
                     else pick(value))
            for f in fields(self) for value in [getattr(self, f.name)]}
        return MemoryArrays(**picked)

    def __len__(self) -> int:
        return int(np.size(self.total_bytes))

    @staticmethod
    def concatenate(parts: list[MemoryArrays]) -> MemoryArrays:
        """Several grids' memory, one after the other (flat arrays; a part missing from
        one grid's ``components`` counts 0 there)."""
        flat = [p.take(np.arange(np.size(p.total_bytes))) for p in parts]

        def join(name: str) -> np.ndarray | dict[str, np.ndarray]:
            values = [getattr(p, name) for p in flat]
            if isinstance(values[0], dict):
                keys = dict.fromkeys(k for v in values for k in v)
                pairs = list(zip(values, flat, strict=True))
                return {k: np.concatenate([v.get(k, np.zeros(np.size(p.total_bytes)))
                                           for v, p in pairs]) for k in keys}
            return np.concatenate(values)
        joined: dict[str, Any] = {f.name: join(f.name) for f in fields(MemoryArrays)}
        return MemoryArrays(**joined)


def estimate_arrays(model: ModelSpec, opts: MemoryOptions, cfg: ConfigArrays,
                    overheads: Overheads | None = None, parts: bool = True) -> MemoryArrays:
    """Score every configuration in ``cfg`` (numpy-broadcast) for one model.

    With ``parts=False`` the named parts at the peak (``components``) are left empty:
    the totals are the same, and a plan search, which shows the parts of a hundred
    candidates at most, skips the third of the work that spreads them over the grid.
    """
    ov = overheads or stack_overheads(opts.framework)
    r, opt = recipe_of(opts), OPTIMIZERS[opts.optimizer]
    pp = cfg.pp
    layers = np.ceil(model.num_layers / pp)
    inflight = _inflight(cfg, opts.zero_bubble)
    shared = _per_micro_batch(model, r, opts, cfg, layers, inflight)
    # Every phase as named parts, for the first and the last pipeline stage.
    state_rows = _state_rows(cfg)
    stage_phases = [_stage_phases(model, r, opt, opts, cfg, stage, shared, state_rows)
                    for stage in ('first', 'last')]
    totals = [{p: sum(parts.values()) for p, parts in phases.items()}
              for phases in stage_phases]
    # The most loaded stage is the one with the higher peak.
    use_last = np.max(np.stack(np.broadcast_arrays(*totals[1].values())), axis=0) > \
        np.max(np.stack(np.broadcast_arrays(*totals[0].values())), axis=0)
    phase_bytes = {p: np.where(use_last, totals[1][p], totals[0][p]) for p in PHASES}
    stacked = np.stack(np.broadcast_arrays(*phase_bytes.values()))
    peak_phase = np.argmax(stacked, axis=0)
    tensor_peak = np.max(stacked, axis=0)
    components: dict[str, np.ndarray] = {}
    for i, phase in enumerate(PHASES if parts else ()):
        for pick, phases in ((~use_last, stage_phases[0]), (use_last, stage_phases[1])):
            here = pick & (peak_phase == i)
            for name, value in phases[phase].items():
                components[name] = components.get(name, 0.0) + np.where(here, value, 0.0)

    world = cfg.tp * cfg.pp * cfg.cp * cfg.dp
    overhead = {
        'cuda_context': np.full(np.shape(tensor_peak), ov.cuda_context_bytes),
        'workspace': ov.workspace_bytes + np.where(world > 1, ov.nccl_bytes, 0.0),
        'allocator_reserve': ov.allocator_fraction * tensor_peak,
    }
    total = tensor_peak + sum(overhead.values())
    return MemoryArrays(components=components, phase_bytes=phase_bytes, peak_phase=peak_phase,
                        tensor_peak_bytes=tensor_peak, overhead=overhead, total_bytes=total,
                        activations_per_layer_bytes=np.asarray(shared.layer_act, float))


def recipe_of(opts: MemoryOptions) -> PrecisionRecipe:
    """The precision recipe ``opts`` trains with: its own, with Megatron's main grads in
    bf16 under ``--grad-reduce-in-bf16`` (a stack with Megatron's grad buffer only)."""
    r = RECIPES[opts.precision]
    if opts.grad_reduce_in_bf16 and STACKS[opts.framework].persistent_grad_buffer:
        r = with_bf16_main_grads(r)
    return r


def _token_rows(cfg: ConfigArrays) -> DistinctRows | None:
    """Rows that hold the same micro-batch of tokens per rank: what activations depend on."""
    return distinct_rows(cfg.micro_batch, cfg.seq_len, cfg.tp, cfg.cp, cfg.sequence_parallel,
                         cfg.recompute)


def _state_rows(cfg: ConfigArrays) -> DistinctRows | None:
    """Rows that hold the same model states: what weights, gradients and optimizer states
    depend on."""
    return distinct_rows(cfg.tp, cfg.pp, cfg.ep, cfg.dp, cfg.cp, cfg.zero, cfg.offload,
                         cfg.etp, cfg.dp_replicate)


def _picked(cfg: ConfigArrays, rows: DistinctRows | None) -> ConfigArrays:
    """``cfg`` at the distinct ``rows``, for formulas that read only the rows' key (all of
    ``cfg`` when None)."""
    if rows is None:
        return cfg
    return ConfigArrays(*(rows.pick(getattr(cfg, f.name)) for f in fields(cfg)))


def _float_sizes(cfg: ConfigArrays) -> ConfigArrays:
    """``cfg`` with the micro-batch and sequence length as float64: their products with
    the model's sizes overflow int64 for long sequences and large micro-batches (the
    estimate is in bytes as float64 throughout)."""
    return replace(cfg, micro_batch=np.asarray(cfg.micro_batch, float),
                   seq_len=np.asarray(cfg.seq_len, float))


def _per_micro_batch(model: ModelSpec, r: PrecisionRecipe, opts: MemoryOptions, cfg: ConfigArrays,
                     layers: np.ndarray, inflight: np.ndarray) -> _Shared:
    """The activation figures of one micro-batch, evaluated once per distinct
    :func:`_token_rows` row and spread to every configuration."""
    rows = _token_rows(cfg)
    at = _float_sizes(_picked(cfg, rows))
    b, s, t, c = at.micro_batch, at.seq_len, at.tp, at.cp
    sp = np.asarray(at.sequence_parallel, bool)
    lora = opts.lora if STACKS[opts.framework].kernels == 'hf' else None
    layer_act, layer_full, layer_ckpt = _layer_activations(model, r, opts, at)
    edge: EdgeBytes | Spread = stack_edge_bytes(
        STACKS[opts.framework], model, r, opts.loss,
        edge_bytes(model, r, opts.loss, b, s, t, c, sp, lora), b, s, t, c, sp)
    bwd_tmp = _layer_backward_temp(model, r, b, s, t, c, sp, lora)
    fwd_tmp = _forward_attention_temp(model, opts.attention, b, s, t, c, r, lora)
    extra: _LoraExtras | Spread
    if lora is None:
        zero = np.zeros(())
        # Eager attention's (b, 1, s, s) masks, in the residual stream's dtype, are inputs
        # of every checkpointed layer and so live until the bottom layer's backward
        # (transformers' masking_utils builds one per kind: causal, sliding-window).
        masks = np.where(_whole_layers(at.recompute) & (opts.attention == 'eager'),
                         model.attention_masks * r.residual_bytes * b * s * s / c, 0.0)
        extra = _LoraExtras(first_delta=masks, fwd_tmp=fwd_tmp, layer_fwd_tmp=zero,
                            forward_mask=zero, recompute_tmp=zero, top_rebuilt=layer_full,
                            bottom_rebuilt=layer_full)
    else:
        extra = _lora_extras(model, r, lora, opts.attention, at, layer_full, fwd_tmp)
    # The top layer's backward under full recompute rebuilds its activations first. Under
    # ``half`` the top layer keeps them (Megatron's block method recomputes a chunk's
    # first layers); where torchtitan's even-index rule recomputes it instead, the stage
    # keeps one layer fewer than counted, which outweighs the rebuild.
    cp_fwd_tmp, cp_bwd_tmp = _cp_attention_temps(model, r, opts, at, layer_full, layer_ckpt)
    bwd_tmp = np.maximum(bwd_tmp, cp_bwd_tmp)
    top_bwd_tmp = bwd_tmp + np.where(at.recompute == RECOMPUTE_CODES['full'],
                                     extra.top_rebuilt, 0.0)
    if rows is not None:
        layer_act, layer_full, layer_ckpt, bwd_tmp, top_bwd_tmp, cp_fwd_tmp = (
            rows.spread(a) for a in (layer_act, layer_full, layer_ckpt, bwd_tmp, top_bwd_tmp,
                                     cp_fwd_tmp))
        edge, extra = Spread(edge, rows), Spread(extra, rows)
    # ``half`` keeps everything in the layers it does not recompute.
    half = cfg.recompute == RECOMPUTE_CODES['half']
    recomputed = np.where(cfg.recompute == RECOMPUTE_CODES['full'], layers, np.where(
        half, half_recomputed_layers(model.num_layers, cfg.pp, cfg.vpp), 0.0))
    kept_layers = layers - recomputed
    stage_act = np.where(half, kept_layers * layer_full + recomputed * layer_ckpt,
                         layer_act * layers)
    # Only a user's own loop can hold the output; the other stacks' loops keep the loss.
    loop = opts.loop if STACKS[opts.framework].user_loop else 'trainer'
    outputs = model_output_bytes(model, r, loop, opts.loss, lora, cfg.micro_batch,
                                 cfg.seq_len, cfg.tp, cfg.cp)
    return _Shared(layer_act=layer_act, layer_full=layer_full, layers=layers,
                   stage_act=stage_act, kept_layers=kept_layers,
                   inflight=inflight, edge=edge, bwd_tmp=bwd_tmp, top_bwd_tmp=top_bwd_tmp,
                   fwd_tmp=extra.fwd_tmp, lora=extra, outputs=outputs, cp_fwd_tmp=cp_fwd_tmp,
                   cp_stack=STACKS[opts.framework].context_parallel)


def _model_states(model: ModelSpec, r: PrecisionRecipe, opt: OptimizerKind,
                  opts: MemoryOptions, cfg: ConfigArrays, stage: str, rows: DistinctRows | None
                  ) -> tuple[StageParams | Spread, ModelStateBytes | Spread]:
    """One stage's parameters and model-state bytes for every configuration, evaluated
    once per distinct :func:`_state_rows` row (``rows``; None: on every row)."""
    at = _picked(cfg, rows)
    params = stage_params(model, at.tp, at.pp, at.ep, stage, opts.lora, at.etp)
    ms = model_state_bytes(model, r, opt, params=params, dp=at.dp, cp=at.cp, ep=at.ep,
                           tp=at.tp, etp=at.etp, replicate=at.dp_replicate,
                           zero=at.zero, offload=at.offload,
                           framework=opts.framework, foreach=opts.foreach, lora=opts.lora,
                           prefetch_layers=opts.zero3_prefetch_layers)
    return (params, ms) if rows is None else (Spread(params, rows), Spread(ms, rows))


@dataclass(frozen=True)
class _Shared:
    """Per-micro-batch activation figures both stages use (arrays)."""

    layer_act: np.ndarray  # one layer's saved bytes under the chosen recompute mode
    layer_full: np.ndarray  # one layer's saved bytes without recompute
    layers: np.ndarray  # layers on the most loaded stage
    stage_act: np.ndarray  # the saved bytes of all those layers for one micro-batch
    kept_layers: np.ndarray  # those of them not recomputed
    inflight: np.ndarray  # micro-batches in flight on the first stage
    edge: EdgeBytes | Spread  # Spread: computed on the distinct rows
    bwd_tmp: np.ndarray  # a layer's backward temporaries
    top_bwd_tmp: np.ndarray  # the top layer's, with its recomputation
    fwd_tmp: np.ndarray  # eager attention scores before the softmax
    lora: _LoraExtras | Spread  # what PEFT LoRA changes (neutral values without it)
    outputs: np.ndarray  # the model output the training loop holds (logits or nothing)
    # CP: the top layer's ring attention in forward, with the layer's other tensors then
    # (0 without CP)
    cp_fwd_tmp: np.ndarray = field(default_factory=lambda: np.zeros(()))
    # whether the stack runs CP at all (its estimates name the forward ring's part, 0 or
    # not, so that every configuration of a stack has the same parts)
    cp_stack: bool = False


class _LoraExtras(NamedTuple):
    """Per-micro-batch figures only LoRA's moments need (arrays; neutral without LoRA)."""

    first_delta: np.ndarray  # the first stage's saved bytes beyond the edge's and layers'
    fwd_tmp: np.ndarray  # eager: the scores moment, relative to a layer's saved bytes
    layer_fwd_tmp: np.ndarray  # a layer's widest forward moment, likewise
    forward_mask: np.ndarray  # eager: the attention mask, alive through forward
    recompute_tmp: np.ndarray  # full recompute: a layer's recomputation's widest point
    top_rebuilt: np.ndarray  # the top layer's recomputed activations, less its input
    bottom_rebuilt: np.ndarray  # the bottom layer's, with its input


def _lora_extras(model: ModelSpec, r: PrecisionRecipe, lora: LoraSpec, attention: str,
                 cfg: ConfigArrays, layer_full: np.ndarray, scores_tmp: np.ndarray
                 ) -> _LoraExtras:
    """The moments and corrections of a PEFT LoRA step (see ``activations``).

    * The bottom layer saves less when the embedding output does not require grad (no
      gradient checkpointing, so no ``enable_input_require_grads``).
    * A layer's widest forward point is often its MLP output projection (PEFT's fp32
      copy of its input), and under full recompute its recomputation, beside the
      gradients made so far, can outgrow its backward.
    * Eager attention's mask lives through forward (and through backward under
      recompute, as a checkpoint input); with learned positions the token embedding's
      output is a leaf its grad accumulator keeps (under ``enable_input_require_grads``).
    * A recomputed layer's first norm may save the checkpoint's input itself.
    """
    b, s, t, c = cfg.micro_batch, cfg.seq_len, cfg.tp, cfg.cp
    sp = np.asarray(cfg.sequence_parallel, bool)
    rc = cfg.recompute
    h, a = model.hidden_size, model.num_heads
    fd = lora.frozen_bytes(r.act_bytes)
    hidden_tokens = b * s / c * h / np.where(sp & (t > 1), t, 1)

    def terms(lt: LayerTerms) -> np.ndarray:
        return lt.bytes(b, s, t, c, sp, h, a)

    first_delta = np.choose(rc, np.broadcast_arrays(*(
        terms(lora_first_layer_delta(model, r, lora, attention, mode))
        for mode in ('none', 'selective', 'full'))))

    def widest(recomputing: bool) -> np.ndarray:
        return np.max(np.stack(np.broadcast_arrays(*(
            terms(moment) + weight / t
            for moment, weight in lora_forward_temps(model, r, lora, recomputing)))), axis=0)

    layer_fwd_tmp = widest(False)
    fwd_tmp = scores_tmp
    forward_mask = np.zeros(())
    if attention == 'eager':
        # the last layer's scores, before the rest of that layer exists
        fwd_tmp = scores_tmp + terms(lora_scores_moment(model, r, lora))
        layer_fwd_tmp = np.maximum(fwd_tmp, layer_fwd_tmp)
        # (b, 1, s, s) in the residual stream's dtype; a checkpoint input under full
        # recompute (and under selective, which recomputes the attention core from it)
        mask = fd * b * s * s / c
        forward_mask = np.where(rc >= 1, 0.0, mask)
        first_delta = first_delta + np.where(rc >= 1, mask, 0.0)
    if model.position_embedding == 'learned':
        first_delta = first_delta + np.where(rc == 2, fd * hidden_tokens, 0.0)
    top_rebuilt = bottom_rebuilt = layer_full
    if lora_norm_saves_input(model, r, lora):
        top_rebuilt = layer_full - fd * hidden_tokens
    else:
        bottom_rebuilt = layer_full + fd * hidden_tokens
    return _LoraExtras(first_delta=np.asarray(first_delta, float), fwd_tmp=fwd_tmp,
                       layer_fwd_tmp=np.asarray(layer_fwd_tmp, float),
                       forward_mask=np.asarray(forward_mask, float),
                       recompute_tmp=np.asarray(np.where(rc == 2, widest(True), 0.0), float),
                       top_rebuilt=np.asarray(top_rebuilt, float),
                       bottom_rebuilt=np.asarray(bottom_rebuilt, float))


def _whole_layers(recompute: np.ndarray) -> np.ndarray:
    """Where a mode recomputes whole layers (``full``, ``half``): their checkpoint inputs
    live to the bottom layer's backward, which rebuilds that (recomputed) layer first."""
    return FULL_RECOMPUTE_SHARE[np.asarray(recompute)] > 0


def _cp_attention_temps(model: ModelSpec, r: PrecisionRecipe, opts: MemoryOptions,
                        cfg: ConfigArrays, layer_full: np.ndarray, layer_ckpt: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Context parallelism's ring attention as moments of a step (0 where CP is 1).

    (forward, backward): beyond the saved activations of the stage,

    * forward: the top layer's ring in its forward (``planner.memory.cp_attention``), with
      the tensors that layer holds then where it is recomputed (its checkpoint, counted in
      the activations, excepted): at most what it saves without recompute;
    * backward: one layer's attention backward, beside the gradient of the residual stream
      and of the attention output (the layer's MLP activations, freed by then, are not
      subtracted), or its ring re-run first where that layer is recomputed (whole layers
      under ``full`` and ``half``; the core attention under Megatron's ``selective``;
      torchtitan's op-level SAC saves the SDPA output: no re-run). The larger is compared
      with the layer's MLP backward (``_layer_backward_temp``) by the caller.
    """
    b, s, t, c, rc = cfg.micro_batch, cfg.seq_len, cfg.tp, cfg.cp, cfg.recompute
    stack = STACKS[opts.framework]
    ring = cp_ring_bytes(stack.key, model, r, b, s, t, c)
    hidden_div = np.where(np.asarray(cfg.sequence_parallel, bool) & (t > 1), t, 1)
    residual = r.residual_bytes * b * s / c * model.hidden_size / hidden_div
    dout = r.act_bytes * ring_sizes(model, b, s, t, c).q
    rerun = _whole_layers(rc) | ((rc == RECOMPUTE_CODES['selective']) & (stack.key == 'megatron'))
    on = np.asarray(c) > 1
    backward = np.where(on, residual + np.maximum(dout + ring.backward,
                                                  np.where(rerun, ring.forward, 0.0)), 0.0)
    locals_ = np.where(rc == RECOMPUTE_CODES['none'], 0.0, layer_full - layer_ckpt)
    forward = np.where(on, ring.forward + locals_, 0.0)
    return np.asarray(forward, float), np.asarray(backward, float)


def _layer_activations(model: ModelSpec, r: PrecisionRecipe, opts: MemoryOptions, cfg: ConfigArrays
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Saved activations of one layer: (under each row's recompute mode, without
    recompute, fully recomputed). Under ``half`` the first is the mean of the last two,
    which the stage's layers reach or exceed (it keeps at least half of them whole)."""
    # PEFT LoRA changes what the Hugging Face modules save; Megatron's kernels are
    # modelled for full training only.
    stack = STACKS[opts.framework]
    lora = opts.lora if stack.kernels == 'hf' else None
    sp = np.asarray(cfg.sequence_parallel, bool)
    # an MoE layer's routed copies: over the ranks splitting each expert, and the EP group
    et = expert_tp(cfg.tp, cfg.etp) if model.moe is not None else None
    per_layer = [stack_layer_terms(stack, model, r, opts.attention, mode, lora,
                                   opts.partition_activations)
                 .bytes(cfg.micro_batch, cfg.seq_len, cfg.tp, cfg.cp, sp, model.hidden_size,
                        model.num_heads, et=et, ep=cfg.ep)
                 for mode in ('none', 'selective', 'full')]
    by_code = by_recompute_code(*per_layer)
    return np.choose(cfg.recompute, by_code), by_code[0], by_code[2]


def _inflight(cfg: ConfigArrays, zero_bubble: bool = False) -> np.ndarray:
    """Micro-batches whose activations the first pipeline stage holds at once, counted
    in whole stages (one micro-batch through all of the stage's layers).

    1F1B keeps min(m, p) in flight. Interleaved 1F1B runs 2(p-1) + (v-1)p warm-up
    forwards of one virtual stage (1/v of the layers) on the first rank, plus one in the
    steady state: p + (p-1)/v stages' worth (Korthikanti et al. 2022 §4.2.3), but never
    more than all m·v forwards of the step (Megatron-LM
    megatron/core/pipeline_parallel/schedules.py ``get_pp_rank_microbatches``; torch's
    ``ScheduleInterleaved1F1B`` in torch/distributed/pipelining/schedules.py).
    torch's ``ScheduleInterleavedZeroBubble`` (``zero_bubble``) warms up one forward less
    per hop and frees a chunk's activations at its W: min(m, p)
    (``planner.stacks.pipeline_schedule.zero_bubble_inflight``).
    """
    pp, vpp, m = cfg.pp, cfg.vpp, cfg.grad_accum
    interleaved = np.minimum(m * vpp, pp * vpp + pp - 1) / np.maximum(vpp, 1)
    if zero_bubble:
        interleaved = zero_bubble_inflight(pp, m)
    one_f_one_b = np.minimum(m, pp)
    return np.where(pp > 1, np.where(vpp > 1, interleaved, one_f_one_b), 1.0)


def tensor_peak_floor(model: ModelSpec, opts: MemoryOptions, cfg: ConfigArrays) -> np.ndarray:
    """A cheap lower bound of ``tensor_peak_bytes`` for every configuration.

    The first pipeline stage's weights and optimizer states plus the layer activations it
    holds at the end of forward: every term of that moment, which the peak can only
    exceed. About a sixth of :func:`estimate_arrays`' cost; the plan search drops the
    configurations whose floor alone is over the usable memory before estimating the rest.
    """
    r, opt = recipe_of(opts), OPTIMIZERS[opts.optimizer]
    state_rows, token_rows = _state_rows(cfg), _token_rows(cfg)
    # summed on the distinct rows, then spread once
    _, ms = _model_states(model, r, opt, opts, _picked(cfg, state_rows), 'first', None)
    states = ms.weights + ms.optimizer_states
    layer_act, _, _ = _layer_activations(model, r, opts,
                                         _float_sizes(_picked(cfg, token_rows)))
    if state_rows is not None:
        states = state_rows.spread(states)
    if token_rows is not None:
        layer_act = token_rows.spread(layer_act)
    layers = np.ceil(model.num_layers / cfg.pp)
    inflight = _inflight(cfg, opts.zero_bubble)
    floor = states + layer_act * layers * inflight
    if opts.lora is not None:
        # Under LoRA the bottom layer saves less than the others (the frozen embedding's
        # output needs no grad): the first stage's only term below its layers' share.
        sp = np.asarray(cfg.sequence_parallel, bool)
        delta = np.choose(cfg.recompute, np.broadcast_arrays(*(
            lora_first_layer_delta(model, r, opts.lora, opts.attention, mode).bytes(
                cfg.micro_batch, cfg.seq_len, cfg.tp, cfg.cp, sp, model.hidden_size,
                model.num_heads)
            for mode in ('none', 'selective', 'full'))))
        floor = floor + np.minimum(delta, 0.0) * inflight
    return floor


def _stage_phases(model: ModelSpec, r: PrecisionRecipe, opt: OptimizerKind,
                  opts: MemoryOptions, cfg: ConfigArrays, stage: str, sh: _Shared,
                  state_rows: DistinctRows | None) -> dict[str, dict[str, np.ndarray]]:
    """Named parts of every phase of one pipeline stage (they sum to the phase total)."""
    f = _stage_figures(model, r, opt, opts, cfg, stage, sh, state_rows)
    lora = opts.lora is not None
    return {'forward_end': _forward_end(sh, f, lora),
            'backward_start': _backward_start(sh, f, cfg.recompute, lora),
            'backward_end': _backward_end(sh, f, cfg.recompute, lora),
            'optimizer_step': {**f.static, 'gradients': f.ms.gradients,
                               'optimizer_step_temp': f.ms.optimizer_step_temp}}


class _Casts(NamedTuple):
    """Autocast's low-precision weight copies on one stage (bytes)."""

    head: np.ndarray  # the output head's
    layer: np.ndarray  # one layer's
    cached: np.ndarray  # all held at the end of forward (autocast's cache)
    stored: np.ndarray  # all saved for backward once the cache is gone
    bottom: np.ndarray  # the bottom layer's, during its backward


@dataclass(frozen=True)
class _StageFigures:
    """What every phase of one pipeline stage is made of (bytes, arrays).

    ``static`` holds the parts alive in every phase; ``top`` and ``bottom`` the ZeRO-3
    gathers (and unsharded gradients) at the top and the bottom layer.
    """

    ms: ModelStateBytes | Spread  # Spread: computed on the distinct rows
    last: np.ndarray  # whether this stage computes the loss
    first_edge: np.ndarray
    last_saved: np.ndarray
    acts: np.ndarray
    loss_fwd: np.ndarray
    loss_bwd: np.ndarray
    casts: _Casts
    grads_live: np.ndarray
    head_grads: np.ndarray
    pending: np.ndarray
    static: dict[str, np.ndarray]
    top: dict[str, np.ndarray]
    bottom: dict[str, np.ndarray]


def _stage_figures(model: ModelSpec, r: PrecisionRecipe, opt: OptimizerKind,
                   opts: MemoryOptions, cfg: ConfigArrays, stage: str, sh: _Shared,
                   state_rows: DistinctRows | None) -> _StageFigures:
    """One stage's model states, activations, loss buffers, casts and live gradients."""
    pp = cfg.pp
    params, ms = _model_states(model, r, opt, opts, cfg, stage, state_rows)
    first = (stage == 'first') | (pp == 1)
    last = (stage == 'last') | (pp == 1)
    inflight = sh.inflight if stage == 'first' else 1.0
    first_edge = np.where(first, sh.edge.first_stage + sh.lora.first_delta, 0.0)
    last_saved = np.where(last, sh.edge.last_stage_saved, 0.0)
    acts = sh.stage_act * inflight + first_edge * inflight + last_saved
    grads_live, head_grads, pending = _live_gradients(opts, cfg, ms)
    # The loop's hold on the model output (the logits) spans every phase of the step.
    held = np.where(last, sh.outputs, 0.0)
    static = {'weights': ms.weights, 'optimizer_states': ms.optimizer_states,
              'buffers': ms.ddp_buckets + ms.zero_buckets, 'model_outputs': held}
    top = {'zero3_gathered': ms.zero3_gathered_top + ms.resident_params}
    bottom = {'zero3_gathered': ms.zero3_gathered_bottom + ms.resident_after_backward,
              'unsharded_grad': ms.unsharded_grad_bottom}
    return _StageFigures(
        ms=ms, last=last, first_edge=first_edge, last_saved=last_saved, acts=acts,
        loss_fwd=np.where(last, sh.edge.loss_forward_peak, 0.0),
        loss_bwd=np.where(last, sh.edge.loss_backward_peak, 0.0),
        casts=_autocast_casts(model, r, opts, cfg, stage, sh, params),
        grads_live=grads_live, head_grads=head_grads, pending=pending, static=static,
        top=top, bottom=bottom)


def _autocast_casts(model: ModelSpec, r: PrecisionRecipe, opts: MemoryOptions,
                    cfg: ConfigArrays, stage: str, sh: _Shared,
                    params: StageParams | Spread) -> _Casts:
    """Autocast's weight copies on one stage, full training or LoRA.

    autocast keeps a low-precision copy of each weight a saved matmul reads, until that
    matmul's backward. Under full recompute the layers save none until recomputed, but
    autocast's cast cache holds every copy until the autocast region (forward and loss)
    exits. The cache holds ONE copy per weight (pytorch/pytorch
    aten/src/ATen/autocast_mode.cpp ``cached_cast``: fp32 leaves that require grad),
    whatever the micro-batches in flight: it is never multiplied by them. No stack
    with a pipeline runs autocast (FSDP2's MixedPrecisionPolicy, DeepSpeed and Megatron
    compute in bf16 weights directly).
    """
    pp, rc, e = cfg.pp, cfg.recompute, r.act_bytes
    lora = opts.lora
    if lora is None:
        casting = r.autocast
        head_cast = e * params.head_matmul if casting else np.zeros(())
        layer_cast = e * params.layer_matmul if casting else np.zeros(())
        if casting and model.moe is not None and STACKS[opts.framework].kernels == 'hf':
            layer_cast = layer_cast - e * hf_uncast_expert_matmul(model, cfg.tp, cfg.ep)
        cached_casts = head_cast + layer_cast * sh.layers
        stored_casts = head_cast + layer_cast * sh.kept_layers
        return _Casts(head_cast, layer_cast, cached_casts, stored_casts, layer_cast)
    head_cast, layer_cast, cached_casts, stored_casts = _lora_casts(
        model, r, lora, opts.attention, params, rc, sh.layers,
        np.where((stage == 'first') | (pp == 1), 1.0, 0.0))
    # the output projection's casts (adapter, and an fp32 base's weight) are freed by
    # its backward
    bottom_cast = layer_cast - (e * params.layer_out_adapter if r.autocast else 0.0)
    if r.autocast and lora.frozen_bytes(r.act_bytes) == 4 and not lora.quantized:
        bottom_cast = bottom_cast - e * params.layer_out_proj
    return _Casts(head_cast, layer_cast, cached_casts, stored_casts, bottom_cast)


def _live_gradients(opts: MemoryOptions, cfg: ConfigArrays, ms: ModelStateBytes | Spread
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients alive through forward, the head's once written, and those still to come
    at the bottom layer's backward: (live, head, pending)."""
    # Megatron keeps one contiguous gradient buffer for the whole run; torch.optim users
    # zero_grad(set_to_none=True), so gradients live from the first backward to the
    # step, i.e. during forward only when accumulating.
    stack = STACKS[opts.framework]
    grads_live = np.where(stack.persistent_grad_buffer | (cfg.grad_accum > 1),
                          ms.gradients, 0.0)
    # FSDP2 accumulating unsharded gradients across micro-batches (the HF Trainer's
    # no_sync with accumulation; torch's pipelining stage under PP): a full-size gradient
    # from the first backward to the last micro-batch's reduce-scatter.
    mode = stack.fsdp_unsharded_accumulation
    accumulating = ((mode == 'no_sync') & (cfg.grad_accum > 1)) | (
        (mode == 'pipeline') & (cfg.pp > 1))
    grads_live = np.where(accumulating & (ms.unsharded_gradients > 0),
                          ms.unsharded_gradients, grads_live)
    head_grads = np.where(grads_live > 0, 0.0, ms.head_gradients)
    # At the bottom layer's MLP backward, the embedding's and most of that layer's
    # gradients are still to come.
    pending = ms.embedding_gradients + ms.bottom_layer_gradients
    return grads_live, head_grads, pending


def _forward_end(sh: _Shared, f: _StageFigures, lora: bool) -> dict[str, np.ndarray]:
    """The end of forward: every activation in flight, the loss's buffers (or the top
    layer's widest point under LoRA), autocast's cache."""
    if not lora:
        # The last layer's attention scores die before the logits are made.
        scores_win = sh.fwd_tmp > f.loss_fwd
        end = {**f.static, **f.top, 'gradients': f.grads_live, 'activations': f.acts,
               'logits': np.where(scores_win, 0.0, f.loss_fwd),
               'attention_scores_temp': np.where(scores_win, sh.fwd_tmp, 0.0),
               'autocast_copies': f.casts.cached}
        if not sh.cp_stack:
            return end
        # CP: the top layer's ring attention, before the loss exists (every activation
        # counted, the rest of that layer's too: the safe side)
        ring = {**f.static, **f.top, 'gradients': f.grads_live, 'activations': f.acts,
                'forward_temp': sh.cp_fwd_tmp, 'autocast_copies': f.casts.cached}
        return _larger(end, ring, sh.cp_fwd_tmp > 0)
    # The loss beside every activation, or the top layer's widest point before the
    # final norm and the loss exist.
    scores = sh.fwd_tmp >= sh.lora.layer_fwd_tmp
    return {**f.static, **f.top, **_larger(
        {'gradients': f.grads_live, 'activations': f.acts, 'logits': f.loss_fwd,
         'forward_temp': sh.lora.forward_mask, 'autocast_copies': f.casts.cached},
        {'gradients': f.grads_live, 'activations': f.acts - f.last_saved,
         'attention_scores_temp': np.where(scores, sh.lora.layer_fwd_tmp, 0.0),
         'forward_temp': np.where(scores, 0.0, sh.lora.layer_fwd_tmp) + sh.lora.forward_mask,
         'autocast_copies': f.casts.cached})}


def _backward_start(sh: _Shared, f: _StageFigures, rc: np.ndarray,
                    lora: bool) -> dict[str, np.ndarray]:
    """Backward starts with the loss (its buffers beside every activation), then the top
    layer (loss tensors freed, the head's gradient written and its cast freed, the layer
    recomputed under full recompute). The larger moment counts."""
    casts, ms = f.casts, f.ms
    loss_moment = {'gradients': f.grads_live, 'activations': f.acts, 'logits': f.loss_bwd,
                   'autocast_copies': casts.stored}
    layer_moment = {'gradients': f.grads_live + f.head_grads,
                    'activations': f.acts - f.last_saved,
                    'backward_temp': sh.top_bwd_tmp, 'unsharded_grad': ms.unsharded_grad_top,
                    'autocast_copies': casts.stored - casts.head
                    + np.where(rc == RECOMPUTE_CODES['full'], casts.layer, 0.0)}
    if lora:
        # The top layer's MLP backward follows its output projection's (whose casts are
        # freed); under full recompute its recomputation comes first, every cast made.
        # The final norm's backward (its Python ops' fp32 temporaries) precedes both:
        # the loss gone, nothing of the top layer freed yet.
        layer_moment['autocast_copies'] = layer_moment['autocast_copies'] - (
            casts.layer - casts.bottom)
        recomputing = {**layer_moment,
                       'backward_temp': sh.lora.top_rebuilt + sh.lora.recompute_tmp,
                       'autocast_copies': casts.stored - casts.head
                       + np.where(rc == 2, casts.layer, 0.0)}
        norm_moment = {'gradients': f.grads_live, 'activations': f.acts - f.last_saved,
                       'backward_temp': np.where(f.last, sh.edge.norm_backward_peak, 0.0),
                       'autocast_copies': casts.stored - casts.head}
        layer_moment = _larger(_larger(layer_moment, recomputing, rc == 2), norm_moment)
    return {**f.static, **f.top, **_larger(loss_moment, layer_moment)}


def _backward_end(sh: _Shared, f: _StageFigures, rc: np.ndarray,
                  lora: bool) -> dict[str, np.ndarray]:
    """The bottom layer's backward: its activations (recomputed under full recompute)
    still live, nearly every gradient written."""
    ms = f.ms
    backward_end = {**f.static, **f.bottom,
                    'gradients': np.maximum(f.grads_live, ms.gradients - f.pending),
                    'activations': f.first_edge + np.where(
                        _whole_layers(rc), sh.lora.bottom_rebuilt, sh.layer_act),
                    'autocast_copies': f.casts.bottom, 'backward_temp': sh.bwd_tmp}
    if not lora:
        return backward_end
    # Under full recompute, the bottom layer's recomputation comes before its output
    # projection's adapter gradients.
    recomputing = {**backward_end, 'backward_temp': sh.lora.recompute_tmp,
                   'autocast_copies': f.casts.layer,
                   'gradients': np.maximum(f.grads_live, ms.gradients - f.pending
                                           - ms.bottom_out_proj_gradients)}
    return _larger(backward_end, recomputing, rc == 2)


def _larger(a: dict[str, np.ndarray], b: dict[str, np.ndarray],
            b_happens: bool | np.ndarray = True) -> dict[str, np.ndarray]:
    """Per configuration, the parts of whichever moment has the larger total.

    ``b_happens``: where ``b`` is a moment of the step at all (else ``a``).
    """
    b_wins = (sum(b.values()) > sum(a.values())) & b_happens
    return {name: np.where(b_wins, b.get(name, 0.0), a.get(name, 0.0))
            for name in dict.fromkeys([*a, *b])}


def _lora_casts(model: ModelSpec, r: PrecisionRecipe, lora: LoraSpec, attention: str,
                params: StageParams | Spread, rc: np.ndarray, layers_inflight: np.ndarray,
                bottom_layers: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Autocast's weight copies under LoRA: (head, one layer's, at forward end, stored).

    The fp32 adapters are leaves that require grad, so autocast caches their bf16 copies
    until the autocast region exits, as in full training. A frozen weight is not cached:
    a bf16 or quantized base needs no copy at all, and an fp32 base under autocast is
    cast per use, the copy saved (for the input's gradient) until that matmul's backward
    when its input requires grad: none under full recompute until the layer is
    recomputed, and in the bottom layer only from the first adapter on
    (``bottom_layers`` counts those layers on this stage: the in-flight micro-batches).
    """
    zero = np.zeros(())
    if not r.autocast:
        return zero, zero, zero, zero
    e = r.act_bytes
    adapters = e * params.layer_adapters
    fp32_base = lora.frozen_bytes(r.act_bytes) == 4 and not lora.quantized
    if fp32_base:
        head_cast = e * params.head_matmul
        base_cast = e * params.layer_matmul
        every = lora_saved_base_casts(model, r, lora, attention)
        skipped = 1 - lora_saved_base_casts(model, r, lora, attention,
                                            input_grad=False) / every
        bottom = -base_cast * skipped * np.where(rc == 2, 0.0, bottom_layers)
    else:
        head_cast = base_cast = bottom = zero
    not_recomputed = np.where(rc == 2, 0.0, layers_inflight)
    cached = head_cast + adapters * layers_inflight + base_cast * not_recomputed + bottom
    stored = head_cast + (adapters + base_cast) * not_recomputed + bottom
    return head_cast, adapters + base_cast, cached, stored


def _layer_backward_temp(m: ModelSpec, r: PrecisionRecipe, b: np.ndarray, s: np.ndarray,
                         t: np.ndarray, c: np.ndarray, sp: np.ndarray,
                         lora: LoraSpec | None = None) -> np.ndarray:
    """Gradients alive while one layer runs backward, beyond the activations it frees.

    At the MLP's backward (the widest point, seen with MemTracker): the residual-stream
    gradient, and two f-wide gradients (of act(gate) and up) where a gated MLP's
    product was just consumed, or one for a plain MLP with a fused activation.

    Under LoRA the product (the second projection's input) is saved only for an adapted
    ``down``, so the gradients stand beside the activations without that tensor freed:
    one f-wide gradient more, less what the adapter saved.
    """
    tokens = b * s / c
    hidden_div = np.where(sp & (t > 1), t, 1)
    f = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
    e, res = r.act_bytes, r.residual_bytes
    if lora is not None:
        res = lora.frozen_bytes(r.act_bytes)
        e = r.act_bytes if r.autocast else res
    if m.gated_mlp:
        per_element = 2 * e
    elif m.python_gelu:
        # the product's two input gradients beside the incoming one (fp32 under autocast,
        # with the incoming one's upcast)
        per_element = (12 - e) if r.autocast else 2 * e
    else:
        per_element = e
    residual = res * tokens * m.hidden_size / hidden_div
    if lora is None:
        return residual + per_element * tokens * f / t
    # full training saves the product (its cast under autocast: e bytes)
    down = 'down' in lora.adapted(m)
    down_saved = (2.0 if r.autocast else 4.0) if down else 0.0
    wide = (per_element + e - down_saved) * tokens * f / t
    if lora.quantized:
        # bitsandbytes' backward of the output projection dequantizes its weight beside
        # the adapter's input gradient (its saved input freed) and its own
        at_matmul = ((2 * e - down_saved) if down else e) * tokens * f / t \
            + lora_dequant_bytes(m, r, lora) / t
        wide = np.maximum(wide, at_matmul)
    return residual + wide


def _forward_attention_temp(m: ModelSpec, attention: str, b: np.ndarray, s: np.ndarray,
                            t: np.ndarray, c: np.ndarray, r: PrecisionRecipe,
                            lora: LoraSpec | None = None) -> np.ndarray:
    """Eager attention's fp32 scores and their masked copy, alive before the softmax.

    Under LoRA, by dtype: the scaled scores (the matmul's dtype) beside their sum with
    the mask (the promotion of that and the mask's dtype, the residual stream's), or
    that sum beside the fp32 copy a softmax into fp32 makes of a 16-bit input (its
    output is saved).
    """
    if attention != 'eager':
        return np.zeros(np.shape(b * s))
    per_element = 2 * 4.0
    if lora is not None:
        fd = lora.frozen_bytes(r.act_bytes)
        ec = r.act_bytes if r.autocast else fd
        masked = max(ec, fd)
        to_fp32 = 4.0 if (masked != 4 and (m.softmax_fp32 or r.autocast)) else 0.0
        per_element = max(ec + masked, masked + to_fp32)
    return per_element * b * (m.num_heads / t) * s * (s / c)


# ---- single configuration -------------------------------------------------------------

@dataclass(frozen=True)
class MemoryEstimate:
    """One configuration's memory, every part named, in bytes per GPU."""

    components: dict[str, int]
    overhead: dict[str, int]
    phases: dict[str, int]
    peak_phase: str
    tensor_peak_bytes: int
    total_bytes: int
    capacity_bytes: int | None
    margin_fraction: float
    activations_per_layer_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def usable_bytes(self) -> int | None:
        """Capacity less the safety margin."""
        if self.capacity_bytes is None:
            return None
        return int(self.capacity_bytes * (1 - self.margin_fraction))

    @property
    def headroom_bytes(self) -> int | None:
        """Usable capacity left after the peak (negative: does not fit)."""
        usable = self.usable_bytes
        return None if usable is None else usable - self.total_bytes

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits the GPU with the margin (None without a GPU)."""
        headroom = self.headroom_bytes
        return None if headroom is None else headroom >= 0


def estimate(model: ModelSpec, setup: TrainingSetup, gpu: GpuSpec | None = None, *,
             margin_fraction: float = DEFAULT_MARGIN_FRACTION,
             overheads: Overheads | None = None) -> MemoryEstimate:
    """Per-GPU memory of one configuration, with its breakdown and whether it fits.

    Raises:
        InputError: the layout does not split this model (see ``check_fits_model``).
    """
    check_fits_model(setup, model)
    arrays = estimate_arrays(model, MemoryOptions.from_setup(setup),
                             ConfigArrays.from_setup(setup), overheads)

    def scalar(x: np.ndarray, what: str) -> int:
        # the final guard: a figure that is not finite and >= 0 is an error, never shown
        return round(check_figure(what, float(np.asarray(x))))

    notes = []
    if setup.attention == 'eager' and setup.seq_len >= 4096:
        notes.append('eager attention keeps s^2 scores per head: flash attention saves them')
    return MemoryEstimate(
        components={k: scalar(v, k) for k, v in arrays.components.items()},
        overhead={k: scalar(v, k) for k, v in arrays.overhead.items()},
        phases={k: scalar(v, f'{k} phase') for k, v in arrays.phase_bytes.items()},
        peak_phase=PHASES[int(arrays.peak_phase)],
        tensor_peak_bytes=scalar(arrays.tensor_peak_bytes, 'tensor peak'),
        total_bytes=scalar(arrays.total_bytes, 'total memory'),
        capacity_bytes=None if gpu is None else gpu.memory_bytes,
        margin_fraction=margin_fraction,
        activations_per_layer_bytes=scalar(arrays.activations_per_layer_bytes,
                                           'activations per layer'),
        notes=tuple(notes))
