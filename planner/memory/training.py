"""One training configuration: batch, parallel layout, precision and memory savers.

:class:`TrainingSetup` is the plain, validated input of the memory estimator for
a single configuration. The plan search builds the same quantities as numpy
arrays instead (``planner.memory.peak.ConfigArrays``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from planner import limits
from planner.defaults import (
    DEFAULT_ATTENTION,
    DEFAULT_FRAMEWORK,
    DEFAULT_OPTIMIZER,
    DEFAULT_PRECISION,
    RECOMPUTE_MODES,
)
from planner.errors import InputError
from planner.memory.recipes import OPTIMIZERS, RECIPES
from planner.models.spec import ModelSpec
from planner.stacks import STACK_KEYS, STACKS

OFFLOAD_MODES: tuple[str, ...] = ('none', 'optimizer', 'params')
ATTENTION_KINDS: tuple[str, ...] = ('flash', 'eager')
LOOPS: tuple[str, ...] = ('keep-outputs', 'trainer')  # the first needs more memory
# Loss implementations ('' = the framework's own): HF's fp32-upcast cross-entropy, a
# chunked / fused one (Liger), Megatron's vocab-parallel one ('vocab-parallel' is
# 'megatron' under its kernel's name).
LOSSES: tuple[str, ...] = ('', 'hf', 'chunked', 'vocab-parallel', 'megatron')
FRAMEWORKS: tuple[str, ...] = STACK_KEYS  # the stacks (planner.stacks)
LORA_TARGETS: tuple[str, ...] = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')


@dataclass(frozen=True)
class LoraSpec:
    """Low-rank adapters on a frozen base model, as PEFT builds them.

    Attributes:
        rank: adapter rank r.
        targets: projections that get an adapter. On a model with a fused qkv (or
            gate_up) projection, any of q, k, v (gate, up) adapts the fused one, as
            PEFT's ``target_modules=['c_attn']`` does for GPT-2.
        base_bits: bits per frozen base weight of the decoder layers' projections:
            16 (a bf16 base, ``from_pretrained(torch_dtype=torch.bfloat16)``), 32 (an
            fp32 base), 4 (QLoRA: bitsandbytes NF4 with double quantization) or 8
            (LLM.int8; counted, not checked).

    The adapters themselves are fp32 (PEFT's ``autocast_adapter_dtype=True``) with fp32
    gradients and optimizer states, whatever the recipe; the recipe only says whether
    the forward runs under autocast. The embeddings, norms and head stay unquantized,
    in the base's dtype (see :meth:`frozen_bytes`).
    """

    rank: int
    targets: tuple[str, ...] = ('q', 'k', 'v', 'o')
    base_bits: int = 16

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or isinstance(self.rank, bool):
            raise InputError('--lora-rank', f'must be a whole number, got {self.rank!r}')
        limits.check('lora_rank', self.rank)
        unknown = sorted(set(self.targets) - set(LORA_TARGETS))
        if unknown or not self.targets:
            raise InputError('--lora-targets', f'unknown target(s) {unknown}',
                             ', '.join(LORA_TARGETS))
        if self.base_bits not in (4, 8, 16, 32):
            raise InputError('--lora-base-bits', f'got {self.base_bits}', '4, 8, 16 or 32')

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: rank, targets and base bits."""
        return {'rank': self.rank, 'targets': list(self.targets), 'base_bits': self.base_bits}

    @property
    def quantized(self) -> bool:
        """Whether the base projections are stored below 16 bits (bitsandbytes)."""
        return self.base_bits < 16

    def adapted(self, m: ModelSpec) -> dict[str, tuple[int, int]]:
        """The projections of one decoder layer that get an adapter: name -> (in, out).

        A fused qkv projection (GPT-2's ``c_attn``) is adapted as one module when any
        of q, k, v is targeted, a fused gate_up likewise for gate or up. In a plain
        (non-gated) MLP, ``up`` is the first projection (``c_fc``) and ``gate`` names
        nothing. MoE experts count as one dense MLP of ``ffn_size`` (not checked).
        """
        h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_size
        want = set(self.targets)
        out: dict[str, tuple[int, int]] = {}
        if m.fused_qkv:
            if want & {'q', 'k', 'v'}:
                out['qkv'] = (h, q + 2 * kv)
        else:
            out.update({name: (h, width) for name, width in (('q', q), ('k', kv), ('v', kv))
                        if name in want})
        if 'o' in want:
            out['o'] = (q, h)
        if m.gated_mlp and m.fused_gate_up:
            if want & {'gate', 'up'}:
                out['gate_up'] = (h, 2 * f)
        else:
            out.update({name: (h, f) for name in ('gate', 'up')
                        if name in want and (name == 'up' or m.gated_mlp)})
        if 'down' in want:
            out['down'] = (f, h)
        return out

    def frozen_bytes(self, compute_bytes: int) -> int:
        """Bytes per element of the unquantized frozen weights, and so of the residual stream.

        A 16- or 32-bit base is loaded whole in that dtype (embeddings, norms and head
        included), so the embedding output and the residual stream are in it too. A
        quantized base keeps its other weights in the compute dtype
        (``bnb_4bit_compute_dtype`` with ``torch_dtype``; PEFT's
        ``prepare_model_for_kbit_training`` would upcast them to fp32, not modelled).
        """
        return self.base_bits // 8 if self.base_bits >= 16 else compute_bytes


@dataclass(frozen=True)
class TrainingSetup:
    """A single configuration to estimate.

    Sizes per GPU unless named otherwise. ``dp`` is the data-parallel size;
    the GPUs used are ``tp * pp * cp * dp`` (experts are sharded over ``ep``
    inside the ``dp * cp`` ranks, as in Megatron).
    """

    seq_len: int
    micro_batch: int = 1
    grad_accum: int = 1
    precision: str = DEFAULT_PRECISION
    optimizer: str = DEFAULT_OPTIMIZER
    zero: int = 0
    offload: str = 'none'
    tp: int = 1
    pp: int = 1
    vpp: int = 1  # virtual pipeline chunks per rank (interleaved 1F1B)
    cp: int = 1
    ep: int = 1
    dp: int = 1
    # each expert split over etp ranks; 0: the TP size (Megatron's default
    # --expert-tensor-parallel-size); Megatron folds ep x etp out of tp x cp x dp
    etp: int = 0
    # HSDP: replicas of the FSDP shard group, which then spans dp x cp / replicate ranks
    # (torchtitan's data_parallel_replicate_degree); 1: FSDP over all of dp x cp
    dp_replicate: int = 1
    sequence_parallel: bool = True  # only matters when tp > 1
    recompute: str = 'none'
    attention: str = DEFAULT_ATTENTION
    framework: str = DEFAULT_FRAMEWORK  # the stack (planner.stacks): kernels, loss, states
    loss: str = ''  # 'hf', 'chunked', 'vocab-parallel'; empty: the stack's own
    lora: LoraSpec | None = None
    foreach: bool = True  # torch.optim's multi-tensor step (the CUDA default)
    zero3_prefetch_layers: int = 1  # layers gathered ahead of the current one
    # What the training loop holds: 'keep-outputs' (accelerate / plain loops keep the
    # model output, its logits, through backward and the optimizer step) or 'trainer'
    # (transformers' Trainer and TRL return only the loss from compute_loss).
    loop: str = 'keep-outputs'
    # DeepSpeed's activation checkpointing with partition_activations: each checkpointed
    # layer input split over the TP ranks (the deepspeed stack's switch)
    partition_activations: bool = False
    # torchtitan's InterleavedZeroBubble pipeline schedule where vpp > 1 (its switch)
    zero_bubble: bool = False
    # Megatron's --grad-reduce-in-bf16: the main-grad buffer in bf16 (the megatron stack's
    # switch; off: fp32, Megatron's default with bf16)
    grad_reduce_in_bf16: bool = False
    extra: dict[str, float] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.framework in STACKS and not STACKS[self.framework].sequence_parallel:
            # a stack without sequence parallelism replicates the norms' activations
            # over the TP ranks (DeepSpeed's pipeline engine), whatever the flag says
            object.__setattr__(self, 'sequence_parallel', False)
        if self.precision == '' and self.framework in STACKS:
            # '': the stack's own recipe at this ZeRO stage (``--framework`` implies it)
            object.__setattr__(self, 'precision', STACKS[self.framework].recipe_for(
                self.zero, self.lora is not None))
        for name in ('seq_len', 'micro_batch', 'grad_accum', 'tp', 'pp', 'vpp', 'cp', 'ep', 'dp',
                     'etp', 'dp_replicate'):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InputError(_flag(name), f'must be a whole number, got {value!r}')
            limits.check(name, value)
        if self.world_size > limits.MAX_GPUS:
            raise InputError('--dp', f'tp x pp x cp x dp = {self.world_size:,} GPUs',
                             f'at most {limits.MAX_GPUS:,} GPUs (docs/limits.md)')
        choices = {'precision': tuple(RECIPES), 'optimizer': tuple(OPTIMIZERS),
                   'offload': OFFLOAD_MODES, 'recompute': RECOMPUTE_MODES,
                   'attention': ATTENTION_KINDS, 'framework': FRAMEWORKS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise InputError(_flag(name), f'unknown value {getattr(self, name)!r}',
                                 ', '.join(allowed))
        if self.zero not in (0, 1, 2, 3):
            raise InputError('--zero', f'got {self.zero!r}', '0, 1, 2 or 3')
        if self.loss not in LOSSES:
            raise InputError('--loss', f'unknown value {self.loss!r}', ', '.join(LOSSES[1:]))
        if self.loop not in LOOPS:
            raise InputError('--loop', f'unknown value {self.loop!r}', ', '.join(LOOPS))
        if self.zero3_prefetch_layers < 0:
            raise InputError('--prefetch', 'must be 0 or more')
        if self.offload == 'params' and self.zero != 3:
            raise InputError('--offload', 'params offload needs --zero 3',
                             'none or optimizer with ZeRO 0-2; params with ZeRO 3')
        if self.vpp > 1 and self.pp == 1:
            raise InputError('--vpp', 'virtual pipeline stages need --pp > 1')

    @property
    def loss_kind(self) -> str:
        """The loss implementation whose buffers are counted."""
        return resolve_loss(self.loss, STACKS[self.framework].loss)

    @property
    def world_size(self) -> int:
        """GPUs this configuration uses."""
        return self.tp * self.pp * self.cp * self.dp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: micro-batch x accumulation x data-parallel size."""
        return self.micro_batch * self.grad_accum * self.dp

    def with_changes(self, **changes: object) -> TrainingSetup:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        """Every input with its default filled in, JSON-ready."""
        out: dict[str, object] = {}
        for f in fields(self):
            if f.name == 'extra':
                continue
            value = getattr(self, f.name)
            if f.name == 'lora':
                value = None if value is None else value.to_dict()
            out[f.name] = value
        out['loss'] = self.loss_kind
        return out


def resolve_loss(loss: str, stack_loss: str) -> str:
    """The loss whose buffers are counted: the chosen one, else the stack's own."""
    loss = loss or stack_loss
    return 'megatron' if loss == 'vocab-parallel' else loss


def _flag(name: str) -> str:
    return '--' + name.replace('_', '-')


def check_fits_model(setup: TrainingSetup, model: ModelSpec) -> None:
    """Raise InputError when the layout cannot split this model.

    TP must divide the attention heads and KV heads (each rank holds whole heads);
    PP cannot exceed the layers (and with virtual stages each chunk needs a layer);
    CP splits the sequence into 2·cp chunks for load balance; EP must divide the experts.
    """
    if model.num_heads % setup.tp or model.num_kv_heads % setup.tp:
        raise InputError('--tp', f'{setup.tp} does not divide heads={model.num_heads} and '
                         f'kv_heads={model.num_kv_heads}',
                         'a common divisor: ' + ', '.join(map(str, _divisors_of_both(model))))
    if setup.pp * setup.vpp > model.num_layers:
        raise InputError('--pp', f'pp x vpp = {setup.pp * setup.vpp} exceeds the '
                         f'{model.num_layers} layers', f'at most {model.num_layers}')
    if setup.seq_len % setup.cp:
        raise InputError('--cp', f'{setup.cp} does not divide seq_len={setup.seq_len}',
                         'a divisor of the sequence length')
    if setup.dp_replicate > 1 and (setup.dp % setup.dp_replicate or setup.zero < 2
                                   or setup.dp_replicate == setup.dp * setup.cp):
        raise InputError('--dp-replicate', 'HSDP replicates an FSDP (ZeRO 2-3) shard group '
                         f'of dp x cp / {setup.dp_replicate} ranks',
                         'a divisor of dp below dp x cp, with --zero 2 or 3')
    if setup.ep > 1:
        experts = model.moe.num_experts if model.moe else 1
        if model.moe is None or experts % setup.ep:
            raise InputError('--ep', f'{setup.ep} does not divide the {experts} experts',
                             'a divisor of the number of experts (1 for dense models)')
        etp = setup.etp or setup.tp
        if setup.tp % etp or (setup.tp * setup.dp * setup.cp) % (setup.ep * etp):
            raise InputError('--ep', f'ep x etp = {setup.ep} x {etp} does not divide '
                             f'tp x dp x cp = {setup.tp * setup.dp * setup.cp}',
                             'ep x etp dividing tp x dp x cp, etp dividing tp')


def _divisors_of_both(model: ModelSpec) -> list[int]:
    return [d for d in range(1, model.num_kv_heads + 1)
            if model.num_heads % d == 0 and model.num_kv_heads % d == 0]
