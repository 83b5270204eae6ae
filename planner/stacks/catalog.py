"""The stacks batchfit plans for, each fact with the framework source it comes from.

* ``hf``: Hugging Face Trainer / accelerate / a plain PyTorch loop. DDP under
  ``torch.autocast`` over fp32 weights; FSDP2 through accelerate, which wraps the forward
  in autocast and shards with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=bf16)`` (huggingface/accelerate src/accelerate/accelerator.py
  ``native_amp``; src/accelerate/utils/dataclasses.py ``set_mixed_precision``): fp32
  sharded weights, a bf16 all-gather, no autocast weight copies (autocast caches only fp32
  leaves: pytorch/pytorch aten/src/ATen/autocast_mode.cpp ``cached_cast``). FSDP has no
  ZeRO-1. HSDP (``--dp-replicate``) with FSDP2 through accelerate's ParallelismConfig.
  Whole-layer gradient checkpointing only. No PP/TP/CP. LoRA/QLoRA (PEFT) lives here.
* ``hf-deepspeed``: the Trainer with DeepSpeed ZeRO 0-3. DeepSpeed casts the module to
  bf16 and switches autocast off (deepspeedai/DeepSpeed deepspeed/runtime/engine.py);
  fp32 master and Adam states sharded by ZeRO-1+; with ``grad_accum_dtype: fp32``
  (written by the exporter) ZeRO 0/1 run the BF16_Optimizer, whose fp32 gradient buffer
  is as large as the bf16 parameters (deepspeed/runtime/bf16_optimizer.py
  ``fp32_groups_gradients_flat``; engine.py ``_do_optimizer_sanity_check``).
* ``torchtitan``: FSDP2/HSDP x TP(+SP) x PP x CP x EP with ``MixedPrecisionPolicy(param
  bf16, reduce fp32)`` and no autocast (pytorch/torchtitan
  torchtitan/models/llama3/infra/parallelize.py ``apply_fsdp``;
  torchtitan/distributed/utils.py ``maybe_enable_amp``: autocast only for DDP/single
  device). Under PP, ``reshard_after_forward = not pp_enabled``: gathered bf16 parameters
  stay, and torch's pipelining stage accumulates unsharded gradients (fp32, the reduce
  dtype: torch/distributed/fsdp/_fully_shard/_fsdp_param.py
  ``to_accumulated_grad_if_needed``). AC none / selective op-level / full
  (torchtitan/distributed/activation_checkpoint.py). Its own switches, off by default as
  in torchtitan's JobConfig: float8 linears (``--precision fp8``: torchao Float8Linear
  through ``model.converters = ["quantize.linear.float8"]``), per-block ``torch.compile``
  (``[compile]``) and async TP (``parallelism.enable_async_tensor_parallel``, which
  needs compile: torchtitan/distributed/tensor_parallel.py), and torch's zero-bubble
  pipeline schedule ``InterleavedZeroBubble`` where a rank runs 2+ stages (vpp > 1),
  which torch builds only without compile (torch/distributed/pipelining/schedules.py
  ``_check_torch_compile_compatibility``).
* ``megatron``: Megatron-LM / Megatron-Core: TP+SP, PP+VPP, CP, EP; bf16 weights, a
  contiguous fp32 main-grad buffer, fp32 master + Adam sharded by the distributed
  optimizer (ZeRO-1 only): 2 + 4 + 12/d bytes a parameter (NVIDIA/Megatron-LM
  docs/user-guide/features/dist_optimizer.md). Recompute ``selective`` (core attention)
  or ``full`` (megatron/core/transformer/transformer_config.py). Vocab-parallel fp32
  cross-entropy. ``--overlap-grad-reduce`` is opt-in: no DP overlap by default
  (megatron/training/arguments.py). So are ``--tp-comm-overlap`` (Transformer Engine's
  userbuffers overlap the TP all-gathers and reduce-scatters with the GEMMs; Megatron
  asserts sequence parallelism, which it turns off at TP 1) and ``--grad-reduce-in-bf16``
  (``accumulate_allreduce_grads_in_fp32`` False: a bf16 main-grad buffer, reduced in bf16;
  Megatron-Bridge's ``ddp.grad_reduce_in_fp32 = False``).
* ``deepspeed``: the DeepSpeed engine with its pipeline (Megatron-DeepSpeed): TP, PP
  (1F1B, no virtual stages), ZeRO <= 1 (deepspeed/runtime/pipe/engine.py asserts "ZeRO-2
  and ZeRO-3 are incompatible with pipeline parallelism"), no sequence parallelism; bf16
  module with fp32 master; activation checkpointing of whole layers.
"""

from __future__ import annotations

from planner.defaults import DEFAULT_FRAMEWORK
from planner.errors import InputError
from planner.stacks.spec import Stack, StackMode

_DDP = StackMode('ddp', (0,), 'amp-bf16', 'DDP under torch.autocast(bf16) over fp32 weights')
# HSDP: accelerate's ParallelismConfig(dp_replicate_size, dp_shard_size) builds a
# ("dp_replicate", "dp_shard") mesh and fsdp2_prepare_model hands fully_shard its
# ("dp_replicate", "dp_shard_cp") part: states sharded over dp_shard, replicated over
# dp_replicate (huggingface/accelerate src/accelerate/parallelism_config.py
# fsdp_dim_names; src/accelerate/utils/fsdp_utils.py fsdp2_prepare_model). Only with FSDP2:
# `accelerate launch` refuses the parallelism config without --use_fsdp --fsdp_version 2
# (src/accelerate/commands/launch.py _validate_launch_command); reshard_after_forward
# (ZeRO-3) or not (ZeRO-2) both pass to fully_shard unchanged.
_FSDP_HF = StackMode('fsdp', (2, 3), 'fsdp-bf16', 'FSDP2 through accelerate: fp32 shards, '
                     'bf16 all-gather (ZeRO-3 reshards after forward, ZeRO-2 does not)',
                     hybrid_shard=True)
_LORA = StackMode('peft', (0, 1, 2, 3), 'amp-bf16', 'PEFT adapters (fp32) on a frozen base '
                  'under torch.autocast, with DDP, DeepSpeed ZeRO or FSDP')
_DS = StackMode('zero', (0, 1, 2, 3), 'ds-bf16', 'DeepSpeed ZeRO: bf16 module, fp32 master '
                'and states')
# HSDP: data_parallel_replicate_degree x data_parallel_shard_degree, FSDP over the
# ("dp_replicate", "fsdp") mesh (pytorch/torchtitan torchtitan/config/job_config.py;
# torchtitan/models/llama3/infra/parallelize.py apply_fsdp)
_FSDP_TITAN = StackMode('fsdp', (2, 3), 'fsdp-bf16', 'FSDP2 MixedPrecisionPolicy(param bf16, '
                        'reduce fp32)', hybrid_shard=True)
_DDP_TITAN = StackMode('ddp', (0,), 'amp-bf16', 'replicate (DDP) under torch.autocast, only '
                       'without TP/PP/CP')
_MEGATRON = StackMode('distributed-optimizer', (0, 1), 'bf16-mixed', 'bf16 weights, fp32 '
                      'main grads, fp32 master + Adam (ZeRO-1: --use-distributed-optimizer)')
_PIPE = StackMode('pipe', (0, 1), 'ds-bf16', 'pipeline engine, bf16 module, fp32 master')

# The losses a stack's launchers switch on (``--loss``; '' is the stack's own):
# * ``chunked``, Liger's fused linear cross-entropy (linkedin/Liger-Kernel
#   src/liger_kernel/ops/fused_linear_cross_entropy.py), in the Hugging Face stacks only:
#   transformers' ``TrainingArguments.use_liger_kernel`` makes the Trainer call
#   ``_apply_liger_kernel_to_instance(model)`` (huggingface/transformers
#   src/transformers/trainer.py, src/transformers/integrations/liger.py), LLaMA-Factory's
#   ``enable_liger_kernel`` calls the family's ``apply_liger_kernel_to_*()``
#   (hiyouga/LLaMA-Factory src/llamafactory/model/model_utils/liger_kernel.py), a script of
#   the user's loads the model through ``AutoLigerKernelForCausalLM``. Each replaces the
#   family's ``XForCausalLM.forward`` (fused_linear_cross_entropy defaults to True in every
#   apply_liger_kernel_to_*: src/liger_kernel/transformers/monkey_patch.py), which in
#   training with labels skips the logits (``skip_logits``: model/llama.py
#   ``lce_forward``). The default config also swaps in Liger's RMSNorm, SwiGLU/GeGLU and
#   RoPE, which save no more than the eager modules the memory model counts (RMSNorm: input
#   and fp32 rstd; SwiGLU: gate and up outputs, silu recomputed in backward; RoPE: in
#   place): the estimate stays on the safe side. Under ZeRO-3 the head weight read inside
#   the forward is gathered as an external parameter (deepspeedai/DeepSpeed
#   deepspeed/runtime/zero/parameter_offload.py ``ZeROOrderedDict.__getitem__``); under
#   accelerate's FSDP2 the final norm and the head are one unit, unsharded by the norm's
#   forward (huggingface/accelerate src/accelerate/utils/fsdp_utils.py
#   ``fsdp2_prepare_model``).
# * torchtitan 0.2.2 has one loss, ``cross_entropy_loss`` over ``pred.float()``
#   (torchtitan/components/loss.py): the ``hf`` kind (loss parallel under TP, counted per
#   vocabulary shard); no chunked loss in its config (torchtitan/config/job_config.py).
# * Megatron-LM runs vocab-parallel cross-entropy, unfused or with
#   ``--cross-entropy-loss-fusion`` (``--cross-entropy-fusion-impl native``: the fused
#   kernel still saves the fp32 exp-logits, megatron/core/fusions/fused_cross_entropy.py;
#   ``te`` is refused in megatron/training/arguments.py): both the ``megatron`` kind. The
#   DeepSpeed pipeline stack (Megatron-DeepSpeed) runs Megatron's vocab-parallel loss in
#   the user's PipelineModule: no switch for another.
# The model types Liger patches: those both transformers' Trainer (Liger's
# MODEL_TYPE_TO_APPLY_LIGER_FN, monkey_patch.py at ead96b6) and LLaMA-Factory 0.9.5
# (model_utils/liger_kernel.py) apply its kernels to. On any other type Liger logs "no Liger
# kernels supported" and the job keeps the fp32 logits (more memory than planned).
LIGER_MODEL_TYPES: frozenset[str] = frozenset((
    'gemma', 'gemma2', 'gemma3', 'gemma3_text', 'glm4', 'glm4v', 'granite', 'llama', 'llava',
    'mistral', 'mixtral', 'mllama', 'olmo2', 'paligemma', 'phi3', 'qwen2', 'qwen2_vl',
    'qwen2_5_vl', 'qwen3', 'qwen3_moe', 'qwen3_next', 'qwen3_5', 'gpt_oss'))
_HF_LOSSES = ('hf', 'chunked')
_LIGER = {'chunked': LIGER_MODEL_TYPES}
_VOCAB_PARALLEL = ('vocab-parallel', 'megatron')

STACKS: dict[str, Stack] = {s.key: s for s in (
    Stack(key='hf', label='Hugging Face', description='HF Trainer / accelerate: DDP with '
          'autocast, or FSDP2; whole-layer checkpointing; data parallel only',
          modes=(_DDP, _FSDP_HF), lora_modes=(_LORA,),
          precisions=('amp-bf16', 'amp-fp16', 'fsdp-bf16', 'fp32', 'tf32', 'bf16'),
          recompute={'none': 'off', 'full': 'gradient checkpointing (whole layers)'},
          kernels='hf', loss='hf', losses=_HF_LOSSES, loss_model_types=_LIGER,
          fsdp_unsharded_accumulation='no_sync',
          ddp_buckets=True, zero_buckets=True, user_loop=True,
          launchers=('hf', 'accelerate', 'torchrun', 'lightning', 'llamafactory', 'slurm'),
          sources=('huggingface/accelerate src/accelerate/accelerator.py',
                   'huggingface/transformers src/transformers/trainer.py')),
    Stack(key='hf-deepspeed', label='HF + DeepSpeed', description='HF Trainer with DeepSpeed '
          'ZeRO 0-3: bf16 module, fp32 master and states, no autocast',
          modes=(_DS,), precisions=('ds-bf16', 'fp16-mixed'),
          recompute={'none': 'off', 'full': 'gradient checkpointing (whole layers)'},
          kernels='hf', loss='hf', losses=_HF_LOSSES, loss_model_types=_LIGER,
          ddp_buckets=True, zero_buckets=True, user_loop=True,
          # DeepSpeed 0.19 rejects MiCS's mics_shard_size (deepspeed/runtime/config.py);
          # ZeRO++ hpZ (zero_hpz_partition_size) adds a secondary weight copy per node and
          # keeps gradients and optimizer states sharded over every rank: not HSDP
          # (deepspeed/runtime/zero/config.py)
          no_hybrid_shard='DeepSpeed removed MiCS; ZeRO++ hpZ keeps optimizer states '
          'sharded over every rank',
          launchers=('deepspeed', 'hf', 'accelerate', 'slurm'),
          sources=('deepspeedai/DeepSpeed deepspeed/runtime/engine.py',
                   'deepspeedai/DeepSpeed deepspeed/runtime/bf16_optimizer.py')),
    Stack(key='torchtitan', label='torchtitan', description='FSDP2/HSDP x TP x PP x CP x EP, '
          'bf16 parameters with fp32 reduction, no autocast',
          modes=(_DDP_TITAN, _FSDP_TITAN), precisions=('fsdp-bf16', 'fsdp-fp8', 'fp32'),
          # float8 is a converter in torchtitan (model.converters, torchao Float8Linear),
          # torch.compile and async TP are its switches (torchtitan/config/job_config.py)
          # zero_bubble: parallelism.pipeline_parallel_schedule = "InterleavedZeroBubble"
          # where a rank has 2+ stages (torch/distributed/pipelining/schedules.py;
          # torchtitan/distributed/pipeline_parallel.py)
          precision_aliases={'fp8': {'fsdp': 'fsdp-fp8'}},
          options=('compile', 'async_tp', 'zero_bubble'),
          # selective_ac_option "2" (its default) wraps every layer whose index is even
          # in a checkpoint (torchtitan/distributed/activation_checkpoint.py
          # _apply_layer_sac): batchfit's ``half``
          recompute={'none': 'none', 'selective': 'selective (op-level SAC)', 'full': 'full',
                     'half': 'selective (every 2nd layer)'},
          kernels='hf', loss='hf', losses=('hf',), tensor_parallel=True,
          pipeline_parallel=True, virtual_stages=True, context_parallel=True,
          expert_parallel=True, sequence_parallel=True, zero_with_pp=(2, 3),
          zero0_with_split=False,
          fsdp_unsharded_accumulation='pipeline', ddp_buckets=True,
          # torchtitan benchmarks/llama3_h100_202412_torchtitan.md reports reserved memory;
          # the reserve over the tensor peak was fitted on its Table 3 (Llama-3.1-8B, FSDP
          # 128, local batch 2, seq 8192, selective op AC: 67.0 GiB published; tensor peak
          # 57.14 GiB + 0.81 GiB context and workspace: (67.0 - 0.81) / 57.14 - 1 = 0.158)
          # and validated on Table 1 (FSDP 8: tests/planner/test_stacks.py).
          allocator_fraction=0.16,
          launchers=('torchtitan', 'slurm'),
          sources=('pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py',
                   'pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py')),
    Stack(key='megatron', label='Megatron-LM', description='Megatron-Core: TP+SP, PP+VPP, CP, '
          'EP, distributed optimizer (ZeRO-1), Transformer Engine kernels',
          modes=(_MEGATRON,), precisions=('bf16-mixed', 'fp16-mixed', 'fp8'),
          # --recompute-method block --recompute-num-layers N recomputes the first N
          # layers of each model chunk (megatron/core/transformer/transformer_block.py
          # _checkpointed_forward): batchfit's ``half`` takes N = half the chunk, rounded down
          recompute={'none': 'none', 'selective': 'selective (core attention)',
                     'full': 'full (uniform, every layer)',
                     'half': 'full, block (half of each chunk\'s layers)'},
          kernels='megatron', loss='megatron', losses=_VOCAB_PARALLEL, tensor_parallel=True,
          pipeline_parallel=True, virtual_stages=True, context_parallel=True,
          expert_parallel=True, sequence_parallel=True, zero_with_pp=(0, 1),
          persistent_grad_buffer=True,
          # --expert-tensor-parallel-size (default: the TP size); the expert ranks are
          # folded out of tp x cp x dp (megatron/core/parallel_state.py
          # initialize_model_parallel: expert-data-parallel = tp*cp*dp / (ep*etp))
          expert_tensor_parallel=True,
          efficiency='megatron', dp_overlap=0.0,
          # --overlap-grad-reduce (with --overlap-param-gather) buckets the gradient
          # reduce-scatter behind the backward; off unless asked (Megatron-LM
          # megatron/core/distributed/distributed_data_parallel_config.py overlap_grad_reduce).
          # --tp-comm-overlap (megatron/core/model_parallel_config.py tp_comm_overlap,
          # default False; megatron/training/initialize.py _initialize_tp_communicators
          # calls Transformer Engine's initialize_ub) and --grad-reduce-in-bf16
          # (megatron/training/arguments.py: accumulate_allreduce_grads_in_fp32 = False, so
          # megatron/core/distributed/distributed_data_parallel.py makes the grad buffer in
          # the parameters' bf16) are off unless asked, as in Megatron-LM.
          options=('overlap_grad_reduce', 'tp_comm_overlap', 'grad_reduce_in_bf16'),
          launchers=('megatron', 'slurm'),
          sources=('NVIDIA/Megatron-LM docs/user-guide/features/dist_optimizer.md',
                   'NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py')),
    Stack(key='deepspeed', label='DeepSpeed pipeline', description='DeepSpeed engine with its '
          'pipeline: TP, PP (1F1B), ZeRO 0-1',
          modes=(_PIPE,), precisions=('ds-bf16', 'fp16-mixed'),
          recompute={'none': 'none', 'full': 'activation checkpointing (whole layers)'},
          kernels='megatron', loss='megatron', losses=_VOCAB_PARALLEL, tensor_parallel=True,
          pipeline_parallel=True, zero_with_pp=(0, 1), zero_buckets=True, dp_overlap=0.0,
          # activation_checkpointing.partition_activations splits each checkpointed layer
          # input over the model-parallel ranks and all-gathers it before the layer is
          # recomputed (deepspeed/runtime/activation_checkpointing/checkpointing.py
          # partition_activations, gather_partitioned_activations)
          options=('partition_activations',),
          launchers=('deepspeed', 'slurm'),
          sources=('deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py',)),
)}
STACK_KEYS: tuple[str, ...] = tuple(STACKS)
# What a single-configuration estimate assumes when no stack is named.
DEFAULT_STACK = DEFAULT_FRAMEWORK


def get_stack(key: str, field_name: str = '--framework') -> Stack:
    """The stack called ``key``.

    Raises:
        InputError: no such stack.
    """
    stack = STACKS.get(key)
    if stack is None:
        raise InputError(field_name, f'unknown stack {key!r}', ', '.join(STACK_KEYS))
    return stack
