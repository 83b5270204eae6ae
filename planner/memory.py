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

from planner.activations import RECOMPUTE_CODES, edge_bytes, layer_terms
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

    stages = {}
    for stage in ('first', 'last'):
        params = stage_params(model, t, pp, cfg.ep, stage, opts.lora)
        ms = model_state_bytes(model, r, opt, params=params, dp=cfg.dp, cp=c, ep=cfg.ep,
                               zero=cfg.zero, offload=cfg.offload, framework=opts.framework,
                               foreach=opts.foreach, lora=opts.lora,
                               prefetch_layers=opts.zero3_prefetch_layers)
        is_first = stage == 'first'
        is_last = (stage == 'last') | (pp == 1)
        stage_inflight = inflight if is_first else 1.0
        # autocast saves a low-precision copy of every weight a saved matmul uses; under
        # full recompute only the layer being recomputed (and the head) holds them.
        autocast = np.zeros(()) if not r.autocast or opts.lora is not None else \
            r.act_bytes * (params.head_matmul + params.layer_matmul * np.where(
                rc == 2, 1.0, layers * stage_inflight))
        acts = layer_act * layers * stage_inflight
        acts = acts + np.where(is_first | (pp == 1), edge.first_stage * stage_inflight, 0.0)
        acts = acts + np.where(is_last, edge.last_stage_saved, 0.0)
        loss_fwd = np.where(is_last, edge.loss_forward_peak, 0.0)
        loss_bwd = np.where(is_last, edge.loss_backward_peak, 0.0)

        # Megatron keeps one contiguous gradient buffer for the whole run; torch.optim
        # users zero_grad(set_to_none=True), so gradients live from the first backward to
        # the step, i.e. during forward only when accumulating.
        persistent_grads = opts.framework == 'megatron'
        grads_live = np.where(persistent_grads | (m > 1), ms.gradients, 0.0)
        # The top layer's backward starts once the loss's buffers and saved tensors are
        # freed and the head's gradient is written; the larger of the two moments counts.
        last_saved = np.where(is_last, edge.last_stage_saved, 0.0)
        head_grads = np.where(grads_live > 0, 0.0, ms.head_gradients)
        top_layer_wins = top_bwd_tmp + head_grads - last_saved > loss_bwd
        buffers = ms.ddp_buckets + ms.zero_buckets
        static = ms.weights + ms.optimizer_states + buffers
        first_edge = np.where(is_first | (pp == 1), edge.first_stage, 0.0)
        # What each phase adds to the model states. The last layer's attention scores
        # die before the logits are made, and the top layer's backward temporaries are
        # made after the loss's backward buffers are freed: only the larger one counts.
        parts = {
            'forward_end': {'activations': acts,
                            'logits': np.where(loss_fwd >= fwd_tmp, loss_fwd, 0.0),
                            'attention_scores_temp': np.where(loss_fwd < fwd_tmp, fwd_tmp, 0.0),
                            'autocast_copies': autocast},
            'backward_start': {'activations': np.where(top_layer_wins, acts - last_saved, acts),
                               'logits': np.where(top_layer_wins, 0.0, loss_bwd),
                               'backward_temp': np.where(top_layer_wins, top_bwd_tmp, 0.0),
                               'autocast_copies': autocast,
                               'zero3_gathered_grad': ms.zero3_gathered_grad},
            # The bottom layer's backward: its activations (recomputed under full
            # recompute) still live, every gradient but the input embedding's written.
            'backward_end': {'activations': first_edge + np.where(rc == 2, layer_full,
                                                                  layer_act),
                             'autocast_copies': np.where(
                                 r.autocast & (opts.lora is None),
                                 r.act_bytes * params.layer_matmul, 0.0),
                             'backward_temp': bwd_tmp,
                             'zero3_gathered_grad': ms.zero3_gathered_grad},
            'optimizer_step': {'optimizer_step_temp': ms.optimizer_step_temp},
        }
        totals = {}
        # At the bottom layer's MLP backward, the embedding's and most of that layer's
        # gradients are still to come.
        pending = ms.embedding_gradients + ms.bottom_layer_gradients
        grads_at = {'forward_end': grads_live,
                    'backward_start': grads_live + np.where(top_layer_wins, head_grads, 0.0),
                    'backward_end': np.maximum(grads_live, ms.gradients - pending),
                    'optimizer_step': ms.gradients}
        for phase, extra in parts.items():
            base = static + grads_at[phase]
            if phase != 'optimizer_step':
                base = base + ms.zero3_gathered
            totals[phase] = base + sum(extra.values())
        stages[stage] = (ms, parts, totals, grads_at, buffers)

    # The most loaded stage: compare the two stages' peaks.
    peaks = {k: np.max(np.stack(np.broadcast_arrays(*v[2].values())), axis=0)
             for k, v in stages.items()}
    use_last = peaks['last'] > peaks['first']
    phase_bytes = {p: np.where(use_last, stages['last'][2][p], stages['first'][2][p])
                   for p in PHASES}
    stacked = np.stack(np.broadcast_arrays(*phase_bytes.values()))
    peak_phase = np.argmax(stacked, axis=0)
    tensor_peak = np.max(stacked, axis=0)
    components = _components_at_peak(stages, use_last, peak_phase)

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


def _components_at_peak(stages, use_last, peak_phase) -> dict[str, np.ndarray]:
    """Named parts of the peak phase of the chosen stage; they sum to the tensor peak."""
    out: dict[str, np.ndarray] = {}
    for stage, (ms, parts, _totals, grads_at, buffers) in stages.items():
        pick = use_last if stage == 'last' else ~use_last
        for i, phase in enumerate(PHASES):
            here = pick & (peak_phase == i)
            named = {
                'weights': ms.weights,
                'gradients': grads_at[phase],
                'optimizer_states': ms.optimizer_states,
                'buffers': buffers,
                'zero3_gathered': ms.zero3_gathered if phase != 'optimizer_step' else 0.0,
                **parts[phase],
            }
            for name, value in named.items():
                out[name] = out.get(name, 0.0) + np.where(here, value, 0.0)
    for name in ('activations', 'logits', 'attention_scores_temp', 'autocast_copies',
                 'backward_temp',
                 'optimizer_step_temp', 'zero3_gathered_grad'):
        out.setdefault(name, np.zeros_like(peak_phase, dtype=float))
    return out


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
        # the product's two input gradients in fp32 beside the incoming one (and its
        # fp32 upcast under autocast)
        per_element = 12 - e
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
