"""Per-GPU peak training memory, vectorised over configurations.

The peak is the largest total of live tensors over the phases of a step, never
one sum of everything (DOMAIN.md §6):

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

from dataclasses import dataclass, field

import numpy as np

from planner.activations import RECOMPUTE_CODES, EdgeBytes, edge_bytes, layer_terms
from planner.hardware import GpuSpec
from planner.model_spec import ModelSpec
from planner.model_states import OFFLOAD_CODES, model_state_bytes, stage_params
from planner.recipes import OPTIMIZERS, RECIPES
from planner.training import LoraSpec, TrainingSetup, check_fits_model

GIB = 2**30
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


@dataclass(frozen=True)
class MemoryOptions:
    """The categorical choices shared by every configuration of a grid."""

    precision: str = 'amp-bf16'
    optimizer: str = 'adamw'
    attention: str = 'flash'
    framework: str = 'hf'
    loss: str = 'hf'
    lora: LoraSpec | None = None
    foreach: bool = True
    zero3_prefetch_layers: int = 1

    @classmethod
    def from_setup(cls, setup: TrainingSetup) -> MemoryOptions:
        """The categorical part of a single configuration."""
        return cls(precision=setup.precision, optimizer=setup.optimizer,
                   attention=setup.attention, framework=setup.framework,
                   loss=setup.loss_kind, lora=setup.lora, foreach=setup.foreach,
                   zero3_prefetch_layers=setup.zero3_prefetch_layers)


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

    @classmethod
    def from_setup(cls, s: TrainingSetup) -> ConfigArrays:
        """One configuration as 0-d arrays."""
        return cls(*(np.asarray(v) for v in (
            s.seq_len, s.micro_batch, s.grad_accum, s.tp, s.pp, s.vpp, s.cp, s.ep, s.dp,
            s.zero, OFFLOAD_CODES[s.offload], RECOMPUTE_CODES[s.recompute],
            s.sequence_parallel)))


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


def estimate_arrays(model: ModelSpec, opts: MemoryOptions, cfg: ConfigArrays,
                    overheads: Overheads | None = None) -> MemoryArrays:
    """Score every configuration in ``cfg`` (numpy-broadcast) for one model."""
    ov = overheads or Overheads()
    r, opt = RECIPES[opts.precision], OPTIMIZERS[opts.optimizer]
    b, s, t, c = cfg.micro_batch, cfg.seq_len, cfg.tp, cfg.cp
    sp = np.asarray(cfg.sequence_parallel, bool)
    pp, m = cfg.pp, cfg.grad_accum
    rc = cfg.recompute
    h, a = model.hidden_size, model.num_heads

    per_layer = [layer_terms(model, r, opts.attention, mode, opts.framework)
                 .bytes(b, s, t, c, sp, h, a) for mode in ('none', 'selective', 'full')]
    layer_act = np.choose(rc, np.broadcast_arrays(*per_layer))
    layer_full = per_layer[0]
    edge = edge_bytes(model, r, opts.loss, b, s, t, c, sp)

    layers = np.ceil(model.num_layers / pp)
    # 1F1B keeps min(m, p) micro-batches in flight on the first stage; interleaving adds
    # (p-1)/(p·v) (Korthikanti et al. 2022, DOMAIN.md §5).
    interleave = np.where(cfg.vpp > 1, 1 + (pp - 1) / (pp * cfg.vpp), 1.0)
    inflight = np.where(pp > 1, np.minimum(m, pp) * interleave, 1.0)

    bwd_tmp = _layer_backward_temp(model, r, b, s, t, c, sp)
    # The top layer's backward under full recompute rebuilds its activations first.
    top_bwd_tmp = bwd_tmp + np.where(rc == 2, layer_full, 0.0)
    fwd_tmp = _forward_attention_temp(model, opts.attention, b, s, t, c)

    shared = _Shared(layer_act=layer_act, layer_full=layer_full, layers=layers,
                     inflight=inflight, edge=edge, bwd_tmp=bwd_tmp, top_bwd_tmp=top_bwd_tmp,
                     fwd_tmp=fwd_tmp)
    # Every phase as named parts, for the first and the last pipeline stage.
    stage_phases = [_stage_phases(model, r, opt, opts, cfg, stage, shared)
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
    for i, phase in enumerate(PHASES):
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
                        activations_per_layer_bytes=np.asarray(layer_act, float))


@dataclass(frozen=True)
class _Shared:
    """Per-micro-batch activation figures both stages use (arrays)."""

    layer_act: np.ndarray  # one layer's saved bytes under the chosen recompute mode
    layer_full: np.ndarray  # one layer's saved bytes without recompute
    layers: np.ndarray  # layers on the most loaded stage
    inflight: np.ndarray  # micro-batches in flight on the first stage
    edge: EdgeBytes
    bwd_tmp: np.ndarray  # a layer's backward temporaries
    top_bwd_tmp: np.ndarray  # the top layer's, with its recomputation
    fwd_tmp: np.ndarray  # eager attention scores before the softmax


def _stage_phases(model: ModelSpec, r, opt, opts: MemoryOptions, cfg: ConfigArrays,
                  stage: str, sh: _Shared) -> dict[str, dict[str, np.ndarray]]:
    """Named parts of every phase of one pipeline stage (they sum to the phase total)."""
    pp, rc, e = cfg.pp, cfg.recompute, r.act_bytes
    params = stage_params(model, cfg.tp, pp, cfg.ep, stage, opts.lora)
    ms = model_state_bytes(model, r, opt, params=params, dp=cfg.dp, cp=cfg.cp, ep=cfg.ep,
                           zero=cfg.zero, offload=cfg.offload, framework=opts.framework,
                           foreach=opts.foreach, lora=opts.lora,
                           prefetch_layers=opts.zero3_prefetch_layers)
    first = (stage == 'first') | (pp == 1)
    last = (stage == 'last') | (pp == 1)
    inflight = sh.inflight if stage == 'first' else 1.0
    first_edge = np.where(first, sh.edge.first_stage, 0.0)
    last_saved = np.where(last, sh.edge.last_stage_saved, 0.0)
    acts = sh.layer_act * sh.layers * inflight + first_edge * inflight + last_saved
    loss_fwd = np.where(last, sh.edge.loss_forward_peak, 0.0)
    loss_bwd = np.where(last, sh.edge.loss_backward_peak, 0.0)

    # autocast keeps a low-precision copy of each weight a saved matmul reads, until that
    # matmul's backward. Under full recompute the layers save none until recomputed, but
    # autocast's cast cache holds every copy until the autocast region (forward and loss)
    # exits.
    casting = r.autocast and opts.lora is None
    head_cast = e * params.head_matmul if casting else np.zeros(())
    layer_cast = e * params.layer_matmul if casting else np.zeros(())
    cached_casts = head_cast + layer_cast * sh.layers * inflight
    stored_casts = head_cast + layer_cast * np.where(rc == 2, 0.0, sh.layers * inflight)

    # Megatron keeps one contiguous gradient buffer for the whole run; torch.optim users
    # zero_grad(set_to_none=True), so gradients live from the first backward to the
    # step, i.e. during forward only when accumulating.
    grads_live = np.where((opts.framework == 'megatron') | (cfg.grad_accum > 1),
                          ms.gradients, 0.0)
    head_grads = np.where(grads_live > 0, 0.0, ms.head_gradients)
    # At the bottom layer's MLP backward, the embedding's and most of that layer's
    # gradients are still to come.
    pending = ms.embedding_gradients + ms.bottom_layer_gradients

    static = {'weights': ms.weights, 'optimizer_states': ms.optimizer_states,
              'buffers': ms.ddp_buckets + ms.zero_buckets}
    top = {'zero3_gathered': ms.zero3_gathered_top}
    bottom = {'zero3_gathered': ms.zero3_gathered_bottom,
              'unsharded_grad': ms.unsharded_grad_bottom}
    # The last layer's attention scores die before the logits are made.
    scores_win = sh.fwd_tmp > loss_fwd
    forward_end = {**static, **top, 'gradients': grads_live, 'activations': acts,
                   'logits': np.where(scores_win, 0.0, loss_fwd),
                   'attention_scores_temp': np.where(scores_win, sh.fwd_tmp, 0.0),
                   'autocast_copies': cached_casts}
    # Backward starts with the loss (its buffers beside every activation), then the top
    # layer (loss tensors freed, the head's gradient written and its cast freed, the
    # layer recomputed under full recompute). The larger moment counts.
    loss_moment = {'gradients': grads_live, 'activations': acts, 'logits': loss_bwd,
                   'autocast_copies': stored_casts}
    layer_moment = {'gradients': grads_live + head_grads, 'activations': acts - last_saved,
                    'backward_temp': sh.top_bwd_tmp, 'unsharded_grad': ms.unsharded_grad_top,
                    'autocast_copies': stored_casts - head_cast
                    + np.where(rc == 2, layer_cast, 0.0)}
    layer_wins = sum(layer_moment.values()) > sum(loss_moment.values())
    backward_start = {**static, **top}
    for name in set(loss_moment) | set(layer_moment):
        backward_start[name] = np.where(layer_wins, layer_moment.get(name, 0.0),
                                        loss_moment.get(name, 0.0))
    # The bottom layer's backward: its activations (recomputed under full recompute)
    # still live, nearly every gradient written.
    backward_end = {**static, **bottom,
                    'gradients': np.maximum(grads_live, ms.gradients - pending),
                    'activations': first_edge + np.where(rc == 2, sh.layer_full, sh.layer_act),
                    'autocast_copies': layer_cast, 'backward_temp': sh.bwd_tmp}
    optimizer_step = {**static, 'gradients': ms.gradients,
                      'optimizer_step_temp': ms.optimizer_step_temp}
    return {'forward_end': forward_end, 'backward_start': backward_start,
            'backward_end': backward_end, 'optimizer_step': optimizer_step}


def _layer_backward_temp(m: ModelSpec, r, b, s, t, c, sp) -> np.ndarray:
    """Gradients alive while one layer runs backward, beyond the activations it frees.

    At the MLP's backward (the widest point, seen with MemTracker): the residual-stream
    gradient, and two f-wide gradients (of act(gate) and up) where a gated MLP's
    product was just consumed, or one for a plain MLP with a fused activation.
    """
    tokens = b * s / c
    hidden_div = np.where(sp & (t > 1), t, 1)
    f = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
    e = r.act_bytes
    if m.gated_mlp:
        per_element = 2 * e
    elif m.python_gelu:
        # the product's two input gradients beside the incoming one (fp32 under autocast,
        # with the incoming one's upcast)
        per_element = (12 - e) if r.autocast else 2 * e
    else:
        per_element = e
    wide = per_element * tokens * f / t
    return r.residual_bytes * tokens * m.hidden_size / hidden_div + wide


def _forward_attention_temp(m: ModelSpec, attention: str, b, s, t, c) -> np.ndarray:
    """Eager attention's fp32 scores and their masked copy, alive before the softmax."""
    if attention != 'eager':
        return np.zeros(np.shape(b * s))
    return 2 * 4.0 * b * (m.num_heads / t) * s * (s / c)


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
             margin_fraction: float = 0.05, overheads: Overheads | None = None) -> MemoryEstimate:
    """Per-GPU memory of one configuration, with its breakdown and whether it fits.

    Raises:
        InputError: the layout does not split this model (see ``check_fits_model``).
    """
    check_fits_model(setup, model)
    arrays = estimate_arrays(model, MemoryOptions.from_setup(setup),
                             ConfigArrays.from_setup(setup), overheads)

    def scalar(x) -> int:
        return round(float(np.asarray(x)))

    notes = []
    if setup.attention == 'eager' and setup.seq_len >= 4096:
        notes.append('eager attention keeps s^2 scores per head: flash attention saves them')
    return MemoryEstimate(
        components={k: scalar(v) for k, v in arrays.components.items()},
        overhead={k: scalar(v) for k, v in arrays.overhead.items()},
        phases={k: scalar(v) for k, v in arrays.phase_bytes.items()},
        peak_phase=PHASES[int(arrays.peak_phase)],
        tensor_peak_bytes=scalar(arrays.tensor_peak_bytes),
        total_bytes=scalar(arrays.total_bytes),
        capacity_bytes=None if gpu is None else gpu.memory_bytes,
        margin_fraction=margin_fraction,
        activations_per_layer_bytes=scalar(arrays.activations_per_layer_bytes),
        notes=tuple(notes))
