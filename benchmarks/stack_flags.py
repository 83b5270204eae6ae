"""Stack configurations measured in benchmarks/stack_*.py and tests/stacks, with batchfit flags.

Every configuration has two sets of batchfit arguments (``TrainingSetup`` keyword
arguments, which the CLI spells ``--name value`` with ``_`` as ``-``):

* ``today``: the layout pinned and batchfit's defaults otherwise, as on main before
  stacks exist (one global ``--framework {hf,megatron}`` and the ``amp-bf16`` recipe);
* ``target``: the same layout with the stack named by ``--framework`` alone, once the
  stacks land (``planner/stacks``, issue 15).

:func:`setup_kwargs` picks one set; ``BATCHFIT_FLAGS=target`` in the environment (or the
``--flags target`` option of the benchmarks) switches every comparison at once. Until the
stacks land, a ``target`` value the core does not accept makes the comparison report the
row as not reachable instead of crashing.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

FLAG_SETS: tuple[str, ...] = ('today', 'target')


def stacks_landed() -> bool:
    """Whether the core has stacks (``planner/stacks``, issue 15).

    Before that, a ``target`` set may still be accepted and mean something else
    (``--framework megatron`` alone keeps the ``amp-bf16`` recipe today), so the tests
    choose ``target`` only once the stacks exist.
    """
    return importlib.util.find_spec('planner.stacks') is not None


def default_flags() -> str:
    """``$BATCHFIT_FLAGS`` if set, else ``today``: the flag set the tests' tolerances and
    their recorded gaps (``gap_today``) were written for. ``target`` (each stack named by
    ``--framework`` alone) is compared by the benchmarks with ``--flags target``."""
    return os.environ.get('BATCHFIT_FLAGS') or 'today'

# A small Llama-3 shape, the same for torchtitan's Transformer (TransformerModelArgs) and
# transformers' LlamaForCausalLM (LlamaConfig). FFN 768 = torchtitan's rounding of
# int(2 * 4 * 256 / 3) = 682 up to multiple_of 256 (torchtitan/models/llama3/model/model.py,
# FeedForward). Untied embeddings, RMSNorm, no biases in both.
SMALL_LLAMA: dict[str, Any] = {
    'model_type': 'llama', 'hidden_size': 256, 'num_hidden_layers': 4,
    'num_attention_heads': 8, 'num_key_value_heads': 4, 'intermediate_size': 768,
    'vocab_size': 2048, 'max_position_embeddings': 256, 'tie_word_embeddings': False,
    'rms_norm_eps': 1e-5, 'hidden_act': 'silu',
}


@dataclass(frozen=True)
class StackConfig:
    """One measured configuration: how the real framework is run, and batchfit's flags.

    Attributes:
        name: a short id (test ids, benchmark rows).
        stack: the stack that runs it, as ``--framework`` will name it.
        wrapping: ``fsdp2`` (torchtitan's ``apply_fsdp``, optionally after ``apply_tp``),
            ``fsdp2-pp`` (torchtitan's stage split, FSDP2 without reshard after forward,
            1F1B on the first stage), ``ddp`` (transformers' Llama in torch DDP under
            ``torch.autocast``) or ``hf-fsdp2`` (transformers' Llama through accelerate's
            ``fsdp2_prepare_model`` for bf16, over ``ParallelismConfig``'s mesh).
        dp, tp, pp: the mesh (``dp`` is the FSDP sharding degree, or DDP's size).
        replicate: HSDP: ``dp`` is ``replicate`` copies of a ``dp / replicate`` shard group
            (a 2-D ``("dp_replicate", "fsdp")`` mesh, as torchtitan builds it;
            ``("dp_replicate", "dp_shard")``, as accelerate's ParallelismConfig does).
        microbatches: micro-batches per step (the gradient accumulation steps under PP).
        ac: torchtitan's activation checkpointing: ``none``, ``full`` (its ``apply_ac``
            wraps every TransformerBlock; the final norm, the output head and the loss
            stay outside) or ``half`` (selective every 2nd layer: ``selective_ac_option``
            "2" wraps the layers of even index).
        seq_len, micro_batch: tokens per sequence, sequences per micro-batch.
        fake: measured under FakeTensorMode (no allocation); False: a real allocating
            CPU run on the fake process group.
        today, target: batchfit's ``TrainingSetup`` arguments, see the module docstring;
            ``today`` empty: as ``target`` (a row that arrived with the stacks).
        tolerance: the relative error of batchfit's tensor peak that a test accepts.
        gap_today: why batchfit today is outside ``tolerance`` (empty: it is inside);
            names the xfail of tests/stacks.
    """

    name: str
    stack: str
    wrapping: str
    dp: int = 1
    tp: int = 1
    pp: int = 1
    replicate: int = 1
    microbatches: int = 1
    ac: str = 'none'
    seq_len: int = 256
    micro_batch: int = 2
    fake: bool = True
    today: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    tolerance: float = 0.10
    gap_today: str = ''

    @property
    def world_size(self) -> int:
        """Ranks of the fake process group."""
        return self.dp * self.tp * self.pp


def _layout(c: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in c.items() if k in ('dp', 'tp', 'pp', 'zero', 'grad_accum')}


CONFIGS: tuple[StackConfig, ...] = (
    StackConfig(
        'fsdp2-zero3-d2', 'torchtitan', 'fsdp2', dp=2,
        today={'dp': 2, 'zero': 3},
        target={'dp': 2, 'zero': 3, 'framework': 'torchtitan', 'precision': ''},
        gap_today='amp-bf16 charges autocast copies and an fp32 residual stream; FSDP2 '
                  'MixedPrecisionPolicy gathers bf16 weights and runs a bf16 residual'),
    StackConfig(
        'fsdp2-zero3-d4', 'torchtitan', 'fsdp2', dp=4,
        today={'dp': 4, 'zero': 3},
        target={'dp': 4, 'zero': 3, 'framework': 'torchtitan', 'precision': ''},
        gap_today='as fsdp2-zero3-d2'),
    StackConfig(
        'fsdp2-tp2-d2', 'torchtitan', 'fsdp2', dp=2, tp=2,
        today={'dp': 2, 'tp': 2, 'zero': 3},
        target={'dp': 2, 'tp': 2, 'zero': 3, 'framework': 'torchtitan', 'precision': ''},
        gap_today='as fsdp2-zero3-d2, with TP+SP and a vocab-parallel loss'),
    # Full AC and half recompute arrived with the stacks (no ``today`` flags of their own)
    StackConfig(
        'fsdp2-tp2-d2-ac', 'torchtitan', 'fsdp2', dp=2, tp=2, ac='full',
        target={'dp': 2, 'tp': 2, 'zero': 3, 'recompute': 'full', 'framework': 'torchtitan',
                'precision': ''}),
    StackConfig(
        'fsdp2-zero3-d2-half', 'torchtitan', 'fsdp2', dp=2, ac='half',
        target={'dp': 2, 'zero': 3, 'recompute': 'half', 'framework': 'torchtitan',
                'precision': ''}),
    StackConfig(
        'fsdp2-pp2-d2', 'torchtitan', 'fsdp2-pp', dp=2, pp=2, microbatches=4,
        today={'dp': 2, 'pp': 2, 'zero': 3, 'grad_accum': 4},
        target={'dp': 2, 'pp': 2, 'zero': 3, 'grad_accum': 4, 'framework': 'torchtitan',
                'precision': ''},
        gap_today='under PP torchtitan keeps the bf16 stage parameters gathered '
                  '(no reshard after forward) and fp32 unsharded accumulated grads'),
    # HSDP arrived with the stacks (no ``today`` flags of its own)
    StackConfig(
        'hsdp-r2-d4', 'torchtitan', 'fsdp2', dp=4, replicate=2,
        target={'dp': 4, 'zero': 3, 'dp_replicate': 2, 'framework': 'torchtitan',
                'precision': ''}),
    # HSDP through accelerate (hf stack): its fsdp2_prepare_model over ParallelismConfig's
    # ("dp_replicate", "dp_shard") mesh, 2 replicas of 2-rank shard groups
    StackConfig(
        'hf-hsdp-r2-d4', 'hf', 'hf-fsdp2', dp=4, replicate=2,
        target={'dp': 4, 'zero': 3, 'dp_replicate': 2, 'framework': 'hf', 'precision': ''}),
    # A real allocating run (DDP's reducer needs real storage); sequence 64 because CPU
    # bf16 autocast is slow on a CPU without bf16 instructions (about 25 s at 256).
    StackConfig(
        'ddp-autocast-d2', 'hf', 'ddp', dp=2, fake=False, seq_len=64,
        today={'dp': 2},
        target={'dp': 2, 'framework': 'hf', 'precision': ''}),
)


def setup_kwargs(config: StackConfig, flags: str | None = None) -> dict[str, Any]:
    """batchfit's ``TrainingSetup`` arguments for ``config`` under the flag set ``flags``.

    ``flags`` defaults to :func:`default_flags`.
    """
    flags = flags or default_flags()
    if flags not in FLAG_SETS:
        raise ValueError(f'flag set {flags!r}: allowed {", ".join(FLAG_SETS)}')
    chosen = config.today or config.target if flags == 'today' else config.target
    return {'seq_len': config.seq_len, 'micro_batch': config.micro_batch, **chosen}


def cli_flags(kwargs: dict[str, Any]) -> str:
    """The ``batchfit estimate`` flags for ``TrainingSetup`` arguments."""
    names = {'grad_accum': 'grad-accum', 'micro_batch': 'micro-batch', 'seq_len': 'seq-len'}
    gpus = 1
    for key in ('dp', 'tp', 'pp', 'cp'):
        gpus *= int(kwargs.get(key, 1))
    parts = [f'--gpus-per-node {gpus}']  # the CLI takes the GPU count; dp follows from it
    for key, value in kwargs.items():
        if key == 'dp' or value == '':  # '' is the default: the stack's own
            continue
        parts.append(f'--{names.get(key, key.replace("_", "-"))} {value}')
    return ' '.join(parts)


@dataclass(frozen=True)
class MegatronCase:
    """A Megatron layout for benchmarks/stack_megatron.py (the formulas need no run).

    ``today``: Megatron's knobs in today's vocabulary (``--framework megatron`` for its
    kernels, ``--precision bf16-mixed`` for its 18 B/param, ``--zero 1`` for the
    distributed optimizer, ``--recompute selective``); ``target``: ``--framework megatron``
    implying its recipe, with the recompute and distributed optimizer as Megatron's own
    switches.
    """

    name: str
    model: str
    seq_len: int
    micro_batch: int
    tp: int
    pp: int
    dp: int
    microbatches: int
    vpp: int = 1
    today: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)


def _megatron(name: str, model: str, seq_len: int, micro_batch: int, tp: int, pp: int,
              dp: int, microbatches: int, vpp: int = 1) -> MegatronCase:
    layout = {'tp': tp, 'pp': pp, 'dp': dp, 'vpp': vpp, 'grad_accum': microbatches,
              'zero': 1, 'recompute': 'selective'}
    return MegatronCase(name, model, seq_len, micro_batch, tp, pp, dp, microbatches, vpp,
                        today={**layout, 'framework': 'megatron', 'precision': 'bf16-mixed'},
                        target={**layout, 'framework': 'megatron', 'precision': ''})


# Layouts from Narayanan et al. 2021 (Table 1: GPT-3 175B on 1024 A100 at TP8 PP8) and
# Korthikanti et al. 2022 (Table 3: 22B TP8 PP1, 175B TP8 PP8, 530B TP8 PP35, 1T TP8 PP64,
# micro-batch 4, 1, 1, 1, sequence 2048).
MEGATRON_CASES: tuple[MegatronCase, ...] = (
    _megatron('megatron-22b tp8', 'megatron-22b', 2048, 4, tp=8, pp=1, dp=1, microbatches=1),
    _megatron('megatron-175b tp8 pp8', 'megatron-175b', 2048, 1, tp=8, pp=8, dp=8,
              microbatches=64),
    _megatron('megatron-530b tp8 pp35', 'megatron-530b', 2048, 1, tp=8, pp=35, dp=1,
              microbatches=280),
    _megatron('llama-3.1-70b tp8 pp4', 'llama-3.1-70b', 8192, 1, tp=8, pp=4, dp=4,
              microbatches=32, vpp=5),
)


@dataclass(frozen=True)
class DeepSpeedCase:
    """A DeepSpeed ZeRO configuration for benchmarks/stack_deepspeed.py.

    ``today``: DeepSpeed's bf16 optimizer in today's vocabulary (``--precision
    bf16-mixed``: bf16 weights, fp32 master and Adam states); ``target``: ``--framework
    deepspeed`` implying its recipe.
    """

    model: str
    stage: int
    gpus: int
    today: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)


def _deepspeed(model: str, stage: int, gpus: int) -> DeepSpeedCase:
    layout = {'dp': gpus, 'zero': stage}
    return DeepSpeedCase(model, stage, gpus, today={**layout, 'precision': 'bf16-mixed'},
                         target={**layout, 'framework': 'hf-deepspeed', 'precision': ''})


DEEPSPEED_CASES: tuple[DeepSpeedCase, ...] = tuple(
    _deepspeed(model, stage, gpus)
    for model in ('small', 'llama-3.1-8b', 'llama-3.1-70b')
    for stage in (2, 3) for gpus in (8, 64))


# ---- published runs (tests/stacks/data/published_runs.toml) ----------------------------------
# A stack's recompute words in today's vocabulary: torchtitan's op-level selective AC has no
# counterpart today, the nearest is Megatron's core-attention 'selective'.
TODAY_RECOMPUTE = {'selective-op': 'selective', 'selective': 'selective', 'full': 'full',
                   'none': 'none'}


def published_flags(run: dict[str, Any], flags: str | None = None) -> dict[str, Any]:
    """batchfit's search arguments (``PlanRequest`` fields) for a published run.

    ``today``: the layout pinned, ``--framework megatron`` for Megatron runs (else ``hf``),
    Megatron's ``bf16-mixed`` recipe for its runs and batchfit's default otherwise,
    ``fp8`` for fp8 runs, ZeRO-3 for FSDP runs and ZeRO-1 (the distributed optimizer) for
    Megatron's, the recompute in today's words. ``target``: ``--framework <stack>`` with the
    stack's own recompute word and the switches the run's source names (torchtitan's
    compile and async TP; Megatron's overlap grad reduce, TP comm overlap and grad reduce
    in bf16), nothing else.
    """
    flags = flags or default_flags()
    if flags not in FLAG_SETS:
        raise ValueError(f'flag set {flags!r}: allowed {", ".join(FLAG_SETS)}')
    stack = run['stack']
    attention = run.get('attention', 'flash')
    megatron = stack == 'megatron'
    zero = 3 if run.get('dp_shard') else (1 if megatron else 0)  # part of the layout
    if flags == 'target':
        # torchtitan's op-level SAC is the torchtitan stack's 'selective'; its float8
        # converter is its 'fp8' (the fsdp-fp8 recipe), torch.compile and async TP its
        # --compile and --async-tp switches
        recompute = 'selective' if run['recompute'] == 'selective-op' else run['recompute']
        out: dict[str, Any] = {'framework': stack, 'recompute_modes': (recompute,),
                               'attention': attention, 'zero_stages': (zero,)}
        if run['precision'] == 'fp8':
            out['precision'] = 'fp8'
        if stack == 'torchtitan':
            out.update(compile=bool(run.get('compile')), async_tp=bool(run.get('async_tp')))
        for switch in ('overlap_grad_reduce', 'tp_comm_overlap', 'grad_reduce_in_bf16'):
            if megatron and run.get(switch):  # Megatron's switches the run's source names
                out[switch] = True
        return out
    precision = ('fp8' if run['precision'] == 'fp8'
                 else 'bf16-mixed' if megatron else 'amp-bf16')
    return {'framework': 'megatron' if megatron else 'hf', 'precision': precision,
            'zero_stages': (zero,), 'recompute_modes': (TODAY_RECOMPUTE[run['recompute']],),
            'attention': attention}
