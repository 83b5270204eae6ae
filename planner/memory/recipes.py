"""Precision recipes and optimizers: how many bytes each parameter costs.

A recipe says in which dtype the weights, gradients, master weights and
activations live (ZeRO paper, Rajbhandari et al. 2020 §3.1; Megatron-LM
docs/user-guide/features/dist_optimizer.md). An optimizer says how many state elements it
keeps per parameter and whether its step allocates parameter-sized temporaries.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PrecisionRecipe:
    """Where each tensor lives, in bytes per element.

    Attributes:
        key: the name the user types.
        weight_bytes: the parameters the model computes with.
        grad_bytes: the gradient buffer the backward writes into.
        master_bytes: an fp32 master copy kept by the optimizer (0 when the weights
            are themselves the master).
        state_bytes: one optimizer-state element (Adam's m or v).
        act_bytes: one activation element between matmuls.
        residual_bytes: the residual stream (fp32 under autocast, since the
            embedding output is fp32 and fp32 + bf16 promotes to fp32).
        autocast: torch.autocast casts weights to ``act_bytes`` per forward; the
            casts are saved for backward (torch/amp/autocast_mode.py; measured
            with torch 2.13 in tests/groundtruth).
        fp8_weight_bytes: the fp8 workspace Transformer Engine caches per matmul weight
            across micro-batches: the quantized weight and its transpose for the
            backward's GEMM, 2 B/param (``weight_quantizer.set_usage(rowwise=True,
            columnwise=True)`` in transformer_engine/pytorch/module/layernorm_linear.py).
        fused_optimizer: the framework's fused optimizer kernel runs without
            parameter-sized temporaries (Megatron/DeepSpeed/apex); torch.optim's
            foreach path does not.
        compute_dtype: the dtype whose peak FLOP/s applies.
        description: in words.
        gather_bytes: the dtype ZeRO-3/FSDP gathers a unit in (0: ``weight_bytes``);
            FSDP2's ``MixedPrecisionPolicy.param_dtype`` (pytorch/pytorch
            torch/distributed/fsdp/_fully_shard/_fsdp_api.py).
        fsdp: sharded by FSDP2 (fp32 shards, units gathered in ``gather_bytes``, no
            DeepSpeed buckets; ZeRO-2 keeps the gathered parameters from forward to
            backward).
        accum_buffer_bytes: a full-size gradient accumulation buffer the optimizer keeps
            with ZeRO 0-1 (DeepSpeed's BF16_Optimizer with ``grad_accum_dtype`` fp32:
            deepspeedai/DeepSpeed deepspeed/runtime/bf16_optimizer.py).
        float8_linears: torchao ``Float8Linear`` (torchtitan's ``quantize.linear.float8``
            converter, tensorwise scaling): the layers' linear GEMMs run on the fp8 tensor
            cores with dynamic casts around them; the output head stays bf16
            (``filter_fqns = ["output"]``). Timed by ``planner.timing.stack_speed``; its
            memory is the bf16 recipe's (``Float8Linear`` saves its bf16 input and weight
            for backward: pytorch/ao torchao/float8/float8_linear.py).
        float8_all_gather: FSDP2 gathers the converted weights in fp8 (1 B instead of
            ``gather_bytes``; torchao's ``enable_fsdp_float8_all_gather``).
        linear_input_bytes: what a linear saves its input in for the weight gradient
            (0: ``act_bytes``). Transformer Engine's fp8 ``Linear`` and ``LayerNormLinear``
            save the quantized input, one byte an element, and drop the other layout
            (NVIDIA/TransformerEngine transformer_engine/pytorch/module/linear.py and
            layernorm_linear.py, ``saved_inputmat`` / ``ln_out`` with ``update_usage``).
    """

    key: str
    weight_bytes: int
    grad_bytes: int
    master_bytes: int
    state_bytes: int
    act_bytes: int
    residual_bytes: int
    autocast: bool
    fused_optimizer: bool
    compute_dtype: str
    description: str
    fp8_weight_bytes: int = 0
    gather_bytes: int = 0
    fsdp: bool = False
    accum_buffer_bytes: int = 0
    float8_linears: bool = False
    float8_all_gather: bool = False
    linear_input_bytes: int = 0

    @property
    def gathered_bytes(self) -> int:
        """Bytes per element of a gathered (unsharded) parameter."""
        return self.gather_bytes or self.weight_bytes


RECIPES: dict[str, PrecisionRecipe] = {r.key: r for r in (
    PrecisionRecipe('fp32', 4, 4, 0, 4, 4, 4, False, False, 'fp32',
                    'everything in fp32, as plain PyTorch (16 B/param with Adam)'),
    PrecisionRecipe('tf32', 4, 4, 0, 4, 4, 4, False, False, 'tf32',
                    'fp32 tensors, matmuls on TF32 tensor cores'),
    PrecisionRecipe('amp-bf16', 4, 4, 0, 4, 2, 4, True, False, 'bf16',
                    'torch.autocast(bf16) over fp32 parameters (HF Trainer --bf16)'),
    PrecisionRecipe('amp-fp16', 4, 4, 0, 4, 2, 4, True, False, 'fp16',
                    'torch.autocast(fp16) over fp32 parameters with a GradScaler'),
    PrecisionRecipe('bf16-mixed', 2, 4, 4, 4, 2, 2, False, True, 'bf16',
                    'Megatron/DeepSpeed: bf16 weights, fp32 grads and master (18 B/param)'),
    PrecisionRecipe('fp16-mixed', 2, 2, 4, 4, 2, 2, False, True, 'fp16',
                    'ZeRO paper mixed precision: fp16 weights and grads, fp32 master + Adam '
                    '(16 B/param, K=12)'),
    PrecisionRecipe('bf16', 2, 2, 0, 2, 2, 2, False, False, 'bf16',
                    'pure bf16: weights, grads and optimizer states in bf16 (8 B/param)'),
    PrecisionRecipe('fp8', 2, 4, 4, 4, 2, 2, False, True, 'fp8',
                    'Transformer Engine fp8 matmuls over bf16-mixed (18 B/param + fp8 '
                    'weight copies)', fp8_weight_bytes=2, linear_input_bytes=1),
    PrecisionRecipe('fsdp-bf16', 4, 4, 0, 4, 2, 2, False, False, 'bf16',
                    'FSDP2 MixedPrecisionPolicy: fp32 sharded weights, grads and Adam '
                    '(16 B/param over d), bf16 all-gather and compute, no autocast',
                    gather_bytes=2, fsdp=True),
    # torchtitan's float8 (``--precision fp8`` with ``--framework torchtitan``): the
    # fsdp-bf16 recipe with torchao Float8Linear layers; the compute dtype stays bf16 (the
    # peak MFU refers to and that attention and the head run at).
    PrecisionRecipe('fsdp-fp8', 4, 4, 0, 4, 2, 2, False, False, 'bf16',
                    'torchtitan float8: FSDP2 MixedPrecisionPolicy (fp32 shards, bf16 '
                    'compute) with torchao Float8Linear layers (tensorwise, fp8 all-gather)',
                    gather_bytes=2, fsdp=True, float8_linears=True, float8_all_gather=True),
    PrecisionRecipe('ds-bf16', 2, 2, 4, 4, 2, 2, False, True, 'bf16',
                    'DeepSpeed bf16: bf16 weights and grads, fp32 master + Adam, an fp32 '
                    'gradient accumulation buffer with ZeRO 0-1', accum_buffer_bytes=4),
)}


def with_bf16_main_grads(r: PrecisionRecipe) -> PrecisionRecipe:
    """``r`` with Megatron's main-grad buffer in bf16 (``--grad-reduce-in-bf16``;
    Megatron-Bridge ``ddp.grad_reduce_in_fp32 = False``): NVIDIA/Megatron-LM
    megatron/training/arguments.py sets ``accumulate_allreduce_grads_in_fp32`` False, and
    megatron/core/distributed/distributed_data_parallel.py then makes each parameter's
    grad buffer in the parameter's dtype (``grad_dtype = torch.float if
    grad_reduce_in_fp32 else param.dtype``): 2 B per element, accumulated and reduced in
    bf16. A recipe already below fp32 (fp16) keeps its own."""
    return replace(r, grad_bytes=min(r.grad_bytes, 2))


def main_grad_copy_bytes(r: PrecisionRecipe, persistent_grad_buffer: bool) -> int:
    """Bytes per trainable element of the fp32 gradient Megatron's optimizer makes at the
    step from a main-grad buffer below fp32 (0 when the buffer is fp32 or the stack has
    none).

    The distributed optimizer hands each fp32 master shard ``shard_model_grad.float()``
    (NVIDIA/Megatron-LM megatron/core/optimizer/distrib_optimizer.py
    ``_copy_model_grads_to_main_grads``), and the ZeRO-0 ``Float16OptimizerWithFloat16Params``
    ``main_grad.float()`` for every parameter (megatron/core/optimizer/optimizer.py): a
    no-op on an fp32 buffer, a new fp32 tensor on a bf16 or fp16 one, alive until
    ``zero_grad`` before the next forward (megatron/training/training.py ``train_step``).
    """
    return 4 if persistent_grad_buffer and r.master_bytes and r.grad_bytes < 4 else 0


@dataclass(frozen=True)
class OptimizerKind:
    """An optimizer's memory.

    Attributes:
        key: the name the user types.
        states: state tensors per parameter (Adam: m and v).
        state_bytes_override: a fixed element size (8-bit Adam: 1), else the
            recipe's ``state_bytes``.
        factored: Adafactor keeps row and column statistics of each matrix
            instead of a full second moment.
        foreach_temp_states: parameter-sized temporaries of torch's foreach
            step, in state elements (AdamW: the sqrt of v).
        min_quantized_numel: tensors smaller than this keep 32-bit states
            (bitsandbytes ``min_8bit_size``).
    """

    key: str
    states: int
    description: str
    state_bytes_override: int = 0
    factored: bool = False
    foreach_temp_states: int = 0
    min_quantized_numel: int = 0


OPTIMIZERS: dict[str, OptimizerKind] = {o.key: o for o in (
    OptimizerKind('adamw', 2, 'AdamW: first and second moments', foreach_temp_states=1),
    OptimizerKind('adam', 2, 'Adam: first and second moments', foreach_temp_states=1),
    OptimizerKind('adamw-8bit', 2, 'bitsandbytes 8-bit AdamW: block-quantised moments',
                  state_bytes_override=1, min_quantized_numel=4096),
    OptimizerKind('sgd-momentum', 1, 'SGD with momentum: one buffer'),
    OptimizerKind('sgd', 0, 'plain SGD: no state'),
    OptimizerKind('adafactor', 1, 'Adafactor without first moment: factored second moment',
                  factored=True),
)}

# bitsandbytes stores one fp32 absmax per block of 256 elements per quantised state.
ADAM8BIT_BLOCK = 256
