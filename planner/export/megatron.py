"""Megatron-LM ``pretrain_gpt.py`` arguments, launched by torchrun (megatron/training/arguments.py).

Dashed flags only (Megatron's parser has ``allow_abbrev=False`` and no underscore
aliases). The global batch is written explicitly, so Megatron's microbatch calculator
re-derives the accumulation (``global / (micro × dp)``) and stops if the launch gives
another DP size. ``CUDA_DEVICE_MAX_CONNECTIONS=1`` is exported whenever TP or CP > 1.
The model shape flags come from the plan's model; tokenizer and data flags are the
user's to add (the plan does not know them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export.base import (
    Export,
    ExportOptions,
    header,
    learning_rate,
    precision_kind,
    refuse,
    refuse_chunked_loss,
    refuse_empty_stages,
    refuse_hybrid_shard,
    refuse_lora,
    stage_layers,
)
from planner.export.launch import (
    bash_script,
    exports,
    launch_line,
    multi_node_notes,
    script_words,
    torchrun_words,
)
from planner.export.shell import quote
from planner.memory.activations import half_recomputed_per_chunk

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

POSITIONS = {'rotary': 'rope', 'learned': 'learned_absolute', 'none': 'none'}


def megatron_arguments(plan: PlanFile, n: BatchNumbers) -> tuple[list[tuple[str, Any]], list[str]]:
    """``(flag, value)`` pairs (value None for a switch) and notes.

    Raises:
        InputError: a LoRA plan, ZeRO 2/3 (Megatron's distributed optimizer shards only
            the optimizer states), more pipeline stages than layers, or pure bf16.
    """
    c, m = plan.candidate, plan.model.spec
    notes: list[str] = []
    refuse_lora(plan, 'megatron', 'Megatron-LM')
    # Megatron-LM's loss is vocab-parallel cross-entropy, fused or not (planner.stacks.catalog)
    refuse_chunked_loss(plan, 'megatron', 'Megatron-LM', 'vocab-parallel cross-entropy')
    refuse_empty_stages(plan, 'megatron')
    refuse_hybrid_shard(plan, 'megatron')
    if c.zero > 1:
        raise refuse('megatron', f'ZeRO {c.zero} shards gradients or parameters; Megatron\'s '
                     'distributed optimizer shards only the optimizer states (ZeRO-1), so the '
                     'plan would not fit as estimated', 're-plan with --zero 0,1')
    args: list[tuple[str, Any]] = [
        ('--tensor-model-parallel-size', c.tp), ('--pipeline-model-parallel-size', c.pp),
        ('--context-parallel-size', c.cp),
        ('--micro-batch-size', n.micro_batch), ('--global-batch-size', n.global_batch),
    ]
    if c.ep > 1:
        # the plan's expert split; Megatron's default would be the TP size
        args += [('--expert-model-parallel-size', c.ep),
                 ('--expert-tensor-parallel-size', c.etp or c.tp)]
    args += _pipeline_split(m.num_layers, c.pp, c.vpp)
    if c.sequence_parallel and c.tp > 1:
        args.append(('--sequence-parallel', None))
    if c.zero == 1:
        args.append(('--use-distributed-optimizer', None))
    if plan.constraints.overlap_grad_reduce:
        # the plan was timed with the reduce-scatter behind the backward; the parameter
        # all-gather overlap needs the distributed optimizer (megatron/training/arguments.py)
        args.append(('--overlap-grad-reduce', None))
        if c.zero == 1:
            args.append(('--overlap-param-gather', None))
    if plan.constraints.tp_comm_overlap:
        if c.tp > 1 and c.sequence_parallel:
            # the plan was timed with Transformer Engine's userbuffers hiding part of the TP
            # collectives (megatron/training/initialize.py _initialize_tp_communicators)
            args.append(('--tp-comm-overlap', None))
            notes.append('--tp-comm-overlap runs Transformer Engine userbuffers, which need '
                         'CUDA multicast (or UB_SKIPMC=1)')
        else:
            # Megatron asserts sequence parallelism with it and turns SP off at TP 1
            # (megatron/training/arguments.py)
            notes.append('TP comm overlap: not written, the plan has no TP collectives to '
                         'overlap (TP 1)')
    if plan.constraints.grad_reduce_in_bf16 and precision_kind(plan) in ('bf16', 'fp8'):
        # the plan's memory counted a bf16 main-grad buffer (megatron/training/arguments.py:
        # accumulate_allreduce_grads_in_fp32 False)
        args.append(('--grad-reduce-in-bf16', None))
    if c.recompute == 'selective':
        args.append(('--recompute-activations', None))
    elif c.recompute == 'full':
        args += [('--recompute-granularity', 'full'), ('--recompute-method', 'uniform'),
                 ('--recompute-num-layers', 1)]
    elif c.recompute == 'half':
        # the first N layers of each model chunk, N half its layers rounded down: what
        # the memory estimate kept whole (planner.memory.activations.half_recomputed_layers)
        half = int(half_recomputed_per_chunk(m.num_layers, c.pp, c.vpp))
        if half:
            args += [('--recompute-granularity', 'full'), ('--recompute-method', 'block'),
                     ('--recompute-num-layers', half)]
        else:
            notes.append('recompute half: one layer per model chunk, none to recompute')
    args += _model_arguments(m, plan.targets.seq_len)
    args += _rope_and_norm(m, notes)
    notes += _precision(plan, args)
    args += _schedule(plan, notes)
    notes.append('add your tokenizer and data flags (--tokenizer-type, --data-path, ...)')
    return args, notes


def _pipeline_split(num_layers: int, pp: int, vpp: int) -> list[tuple[str, Any]]:
    """Equal virtual stages by their size; any other split as a layout.

    ``--decoder-first/last-pipeline-num-layers`` cannot place every split (the middle
    ranks must share the rest equally, each a multiple of the virtual stages:
    megatron/core/transformer/transformer_config.py ``__post_init__``), so an unequal
    split is written as ``--pipeline-model-parallel-layout``: one ``|``-separated stage
    per virtual stage in layer order (rank-major within each virtual-stage round), the
    embedding ``E`` first and the loss ``L`` last; Megatron reads the virtual stages off
    its length (megatron/core/transformer/pipeline_parallel_layer_layout.py,
    megatron/training/arguments.py ``validate_args``: not with the other VPP flags).
    """
    if num_layers % (pp * vpp) == 0:
        per_stage = num_layers // (pp * vpp)
        return [('--num-layers-per-virtual-pipeline-stage', per_stage)] if vpp > 1 else []
    split = stage_layers(num_layers, pp, vpp)
    stages = [f't*{split[r][v]}' for v in range(vpp) for r in range(pp)]
    return [('--pipeline-model-parallel-layout', 'E' + '|'.join(stages) + 'L')]


def _model_arguments(m: ModelSpec, seq_len: int) -> list[tuple[str, Any]]:
    args: list[tuple[str, Any]] = [
        ('--num-layers', m.num_layers), ('--hidden-size', m.hidden_size),
        ('--ffn-hidden-size', m.ffn_size), ('--num-attention-heads', m.num_heads),
        ('--seq-length', seq_len),
        ('--max-position-embeddings', max(m.max_position_embeddings, seq_len)),
        ('--position-embedding-type', POSITIONS[m.position_embedding]),
        ('--normalization', 'RMSNorm' if m.norm == 'rmsnorm' else 'LayerNorm'),
    ]
    if m.num_kv_heads < m.num_heads:
        args += [('--group-query-attention', None), ('--num-query-groups', m.num_kv_heads)]
    if m.head_dim * m.num_heads != m.hidden_size:
        args.append(('--kv-channels', m.head_dim))
    if m.gated_mlp and m.activation == 'silu':
        args.append(('--swiglu', None))
    if not m.tied_embeddings:
        args.append(('--untie-embeddings-and-output-weights', None))
    if not (m.qkv_bias or m.attn_out_bias or m.mlp_bias):
        args.append(('--disable-bias-linear', None))
    elif m.qkv_bias and not (m.attn_out_bias or m.mlp_bias):
        args += [('--disable-bias-linear', None), ('--add-qkv-bias', None)]
    if m.qk_norm:
        args.append(('--qk-layernorm', None))
    args += [('--attention-dropout', m.attention_dropout), ('--hidden-dropout', m.hidden_dropout)]
    if m.moe is not None:
        args += [('--num-experts', m.moe.num_experts), ('--moe-router-topk', m.moe.top_k),
                 ('--moe-ffn-hidden-size', m.moe.expert_ffn_size)]
    return args


def _rope_and_norm(m: ModelSpec, notes: list[str]) -> list[tuple[str, Any]]:
    """RoPE base and scaling, rotary share and norm epsilon, as the model has them.

    Megatron-LM ``megatron/training/arguments.py``: ``--rotary-base`` (an int, default
    10000), ``--rotary-percent``, ``--use-rope-scaling`` with ``--rope-scaling-factor``
    (Llama-3.x scaling; ``RotaryEmbedding._apply_scaling`` in
    ``megatron/core/models/common/embeddings/rotary_pos_embedding.py`` fixes the low/high
    frequency factors 1 and 4 and the original context 8192, as Llama-3.1 and 3.2 have);
    ``--norm-epsilon`` is ``TransformerConfig.layernorm_epsilon`` (default 1e-5).
    """
    args: list[tuple[str, Any]] = []
    if m.position_embedding == 'rotary':
        if m.rope_base is None:
            notes.append(f'the RoPE base of {m.name} is not known here: add --rotary-base '
                         '(Megatron uses 10000 when it is not given)')
        else:
            args.append(('--rotary-base', round(m.rope_base)))
            if m.rope_base != round(m.rope_base):
                notes.append(f'Megatron takes an integer --rotary-base; the model has '
                             f'{m.rope_base:g}')
        if m.rotary_fraction < 1.0:
            args.append(('--rotary-percent', m.rotary_fraction))
        if m.rope_scaling_factor is not None:
            args += [('--use-rope-scaling', None), ('--rope-scaling-factor',
                                                    float(m.rope_scaling_factor))]
    if m.norm_eps is None:
        notes.append(f'the norm epsilon of {m.name} is not known here: add --norm-epsilon '
                     '(Megatron uses 1e-5 when it is not given)')
    else:
        args.append(('--norm-epsilon', m.norm_eps))
    return args


def _precision(plan: PlanFile, args: list[tuple[str, Any]]) -> list[str]:
    kind = precision_kind(plan)
    if kind == 'bf16-pure':
        raise refuse('megatron', 'Megatron keeps fp32 master weights; the plan trains in pure '
                     'bf16', 're-plan with --precision bf16-mixed')
    if kind in ('bf16', 'fp8'):
        args.append(('--bf16', None))
    elif kind == 'fp16':
        args.append(('--fp16', None))
    if kind == 'fp8':
        args += [('--fp8-format', 'hybrid')]
        return ['fp8 runs through Transformer Engine (--transformer-impl transformer_engine)']
    return []


def _schedule(plan: PlanFile, notes: list[str]) -> list[tuple[str, Any]]:
    g, args = plan.guidance, list[tuple[str, Any]]()
    if plan.steps is not None:
        args.append(('--train-iters', plan.steps))
    else:
        notes.append('the plan has no data size: add --train-iters')
    lr = learning_rate(plan)
    if lr is not None:
        args += [('--lr', lr), ('--min-lr', float(f'{lr / 10:.3g}')),
                 ('--lr-decay-style', 'cosine')]
    else:
        notes.append('no learning rate in the plan: add --lr (plan with --base-lr and '
                     '--base-batch)')
    if g.warmup_steps is not None and plan.steps is not None:
        args.append(('--lr-warmup-iters', int(g.warmup_steps)))
    return args


def argv(args: list[tuple[str, Any]]) -> list[str]:
    """Command-line fragments (``--name value``, quoted)."""
    return [name if value is None else f'{name} {quote(value, name)}' for name, value in args]


def environment(plan: PlanFile) -> dict[str, object]:
    """Variables Megatron needs: one CUDA connection with TP or CP (its own assertion)."""
    c = plan.candidate
    return {'CUDA_DEVICE_MAX_CONNECTIONS': 1} if c.tp > 1 or c.cp > 1 else {}


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """torchrun + pretrain_gpt.py + Megatron flags."""
    args, notes = megatron_arguments(plan, n)
    notes = multi_node_notes(n, options) + notes
    words = (torchrun_words(n, options) + script_words(options.script_or('pretrain_gpt.py'))
             + argv(args) + [quote(a, 'script argument') for a in options.script_args])
    body = [*exports(environment(plan)), launch_line(words)]
    text = bash_script(header(plan, n, 'Megatron-LM'), notes, body)
    return Export(text, 'launch_megatron.sh', tuple(notes))
