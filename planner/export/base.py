"""What every exporter shares: options, the result type, refusals and common mappings."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.errors import InputError
from planner.export.shell import check_text

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

RENDEZVOUS: tuple[str, ...] = ('static', 'c10d')
SHARDING: tuple[str, ...] = ('deepspeed', 'fsdp')
PAYLOADS: tuple[str, ...] = ('torchrun', 'hf', 'megatron', 'torchtitan', 'deepspeed')
_TIME = re.compile(r'(\d+-)?\d{1,2}:\d{2}:\d{2}')
_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]{0,63}')


@dataclass(frozen=True)
class ExportOptions:
    """How to launch, beyond what the plan says.

    Attributes:
        script: the training script (None: the format's usual one, e.g. train.py or
            Megatron's pretrain_gpt.py).
        script_args: extra arguments for the script, passed verbatim (quoted).
        master_addr: the first node's address; None writes ``$MASTER_ADDR``, read on
            each node at run time.
        master_port: the rendezvous port.
        rdzv: multi-node torchrun rendezvous, ``static`` (node ranks) or ``c10d``.
        rdzv_id: the c10d job id shared by all nodes.
        sharding: ZeRO stages > 0 with ``deepspeed`` (default) or ``fsdp``.
        payload: what the Slurm script runs under torchrun: ``torchrun`` (the script
            and its arguments), ``hf``, ``megatron``, ``torchtitan`` or ``deepspeed``
            (their arguments or config too), one the plan's stack runs; None picks the
            stack's own (planner/export/slurm.py ``payload_kind``).
        job_name: Slurm job name (default from the model).
        time_limit: Slurm ``--time`` (``HH:MM:SS`` or ``D-HH:MM:SS``).
        partition: Slurm partition.
        output_dir: where the HF Trainer / LLaMA-Factory write checkpoints.
    """

    script: str | None = None
    script_args: tuple[str, ...] = ()
    master_addr: str | None = None
    master_port: int = 29500
    rdzv: str = 'static'
    rdzv_id: str = 'batchfit'
    sharding: str = 'deepspeed'
    payload: str | None = None
    job_name: str | None = None
    time_limit: str | None = None
    partition: str | None = None
    output_dir: str = 'output'

    def __post_init__(self) -> None:
        if self.script is not None:
            check_text(self.script, '--script')
            if not self.script.strip() or self.script.startswith('-'):
                raise InputError('--script', f'{self.script!r} would be read as a launcher '
                                 'option', 'a file path (write ./-x.py for a name starting '
                                 'with -)')
        for arg in self.script_args:
            check_text(arg, 'script argument')
        for name in ('master_addr', 'output_dir'):
            value = getattr(self, name)
            if value is not None and (not check_text(value, _flag(name)).strip()
                                      or value.startswith('-')):
                raise InputError(_flag(name), f'{value!r} is not usable here')
        if not isinstance(self.master_port, int) or not 1 <= self.master_port <= 65535:
            raise InputError('--master-port', f'{self.master_port!r} is not a port',
                             '1 to 65535')
        _choice('--rdzv', self.rdzv, RENDEZVOUS)
        _choice('--sharding', self.sharding, SHARDING)
        if self.payload is not None:
            _choice('--payload', self.payload, PAYLOADS)
        for name in ('rdzv_id', 'job_name', 'partition'):
            value = getattr(self, name)
            if value is not None and not _NAME.fullmatch(value):
                raise InputError(_flag(name), f'{value!r} is not a plain name',
                                 'letters, digits, ".", "_" and "-", up to 64')
        if self.time_limit is not None and not _TIME.fullmatch(self.time_limit):
            raise InputError('--time', f'{self.time_limit!r} is not a Slurm time',
                             'HH:MM:SS or D-HH:MM:SS')

    def script_or(self, default: str) -> str:
        """The script, or the format's usual one."""
        return self.script if self.script is not None else default


@dataclass(frozen=True)
class Export:
    """One exported text.

    Attributes:
        text: the command script or config file, ending in a newline.
        filename: a sensible file name for it.
        notes: what the launcher cannot express, or what the user must still do (also
            written as comments in the text where its format has comments).
    """

    text: str
    filename: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exporter:
    """One launcher format.

    Attributes:
        name: the ``--format`` value.
        summary: one line for ``--help``.
        render: builds the text from a checked plan and its batch numbers.
    """

    name: str
    summary: str
    render: Callable[[PlanFile, BatchNumbers, ExportOptions], Export]


def refuse(fmt: str, message: str, allowed: str | None = None) -> InputError:
    """The error for a plan this launcher cannot run as planned."""
    return InputError(f'--format {fmt}', message, allowed)


def refuse_empty_stages(plan: PlanFile, fmt: str) -> None:
    """Refuse more pipeline stages than layers: only a hand-written plan file has them
    (the search keeps ``pp * vpp <= layers``, planner/plans/search.py)."""
    c, layers = plan.candidate, plan.model.spec.num_layers
    if c.pp * c.vpp > layers:
        raise refuse(fmt, f'pp {c.pp} x {c.vpp} virtual stages would leave stages empty: '
                     f'the model has {layers} layers', 're-plan with a smaller --pp or --vpp')


def stage_layers(num_layers: int, pp: int, vpp: int) -> list[list[int]]:
    """Transformer layers of each virtual stage, ``[pp rank][virtual stage]``, for a
    pipeline whose stages need not be equal.

    The memory model charges every rank ``ceil(layers / pp)`` layers and the first
    rank's in-flight micro-batches a ``1/vpp`` share of them each (planner/memory/peak.py
    ``estimate_arrays``, ``_inflight``): here no rank holds more, ranks differ by one
    layer at most, the ranks short of a layer are taken from the ends inwards (the first
    also holds the embedding and the most micro-batches in flight, the last the head
    and loss), and each rank's smaller virtual stages come first, so the first rank's
    first virtual stage (in flight most often) holds ``floor(layers per rank / vpp)``.
    A whole split needs ``pp * vpp <= layers``, as the search asks (planner/plans/search.py).
    """
    per_rank = -(-num_layers // pp)
    short = sorted(range(pp), key=lambda r: min(r, pp - 1 - r))[:per_rank * pp - num_layers]
    totals = [per_rank - (r in short) for r in range(pp)]
    return [[n // vpp + (v >= vpp - n % vpp) for v in range(vpp)] for n in totals]


def require_data_parallel(plan: PlanFile, fmt: str) -> None:
    """Refuse TP/PP/CP layouts for launchers that only shard data (HF, Lightning...)."""
    c = plan.candidate
    if c.tp * c.pp * c.cp > 1:
        raise refuse(fmt, f'the plan splits the model (tp/pp/cp/dp {c.layout}); {fmt} runs '
                     'only data parallelism (DDP, ZeRO, FSDP)',
                     'export it as megatron or torchtitan, or re-plan with --tp 1 --pp 1 --cp 1')


def sharding_backend(plan: PlanFile, options: ExportOptions, fmt: str) -> str:
    """``ddp``, ``deepspeed`` or ``fsdp`` for the plan's ZeRO stage.

    FSDP's FULL_SHARD is ZeRO-3 and SHARD_GRAD_OP ZeRO-2; it has no ZeRO-1.
    """
    zero, stack = plan.candidate.zero, plan.candidate.framework
    # The stack says which engine shards (planner.stacks): the Trainer with DeepSpeed, or
    # accelerate's FSDP2 for the hf stack's ZeRO-2/3 (LoRA plans: either, as asked).
    if stack == 'hf-deepspeed':
        return 'deepspeed'
    if zero == 0:
        return 'ddp'
    if stack == 'hf' and plan.constraints.lora is None:
        return 'fsdp'
    if plan.candidate.dp_replicate > 1:  # HSDP is FSDP's (torchtitan plans elsewhere)
        return 'fsdp'
    if options.sharding == 'fsdp' and zero == 1:
        raise refuse(fmt, 'FSDP has no ZeRO-1 (optimizer-only) sharding',
                     '--sharding deepspeed, or re-plan with --zero 0,2,3')
    return options.sharding


def hybrid_shard_sizes(plan: PlanFile, n: BatchNumbers, backend: str,
                       fmt: str) -> tuple[int, int] | None:
    """``(replicas, shard group size)`` of an HSDP plan (None: FSDP over all of DP, or no
    FSDP): accelerate's ``(dp_replicate_size, dp_shard_size)``, Lightning's
    ``device_mesh``.

    accelerate runs HSDP only as FSDP2 over its ("dp_replicate", "dp_shard") mesh, and
    refuses a replicate dimension without a shard one under FSDP2 (huggingface/accelerate
    src/accelerate/parallelism_config.py ``_validate_accelerator``).

    Raises:
        InputError: HSDP outside FSDP (DDP, DeepSpeed), or no shard group.
    """
    replicas = plan.candidate.dp_replicate
    if replicas <= 1:
        return None
    if backend != 'fsdp' or n.dp % replicas or n.dp == replicas:
        raise refuse(fmt, f'HSDP (dp_replicate {replicas} of dp {n.dp}) runs only as FSDP '
                     '(ZeRO 2-3) with shard groups of 2 or more ranks',
                     're-plan with --framework hf --zero 2,3, or with --dp-replicate 1')
    return replicas, n.dp // replicas


def refuse_hybrid_shard(plan: PlanFile, fmt: str) -> None:
    """Refuse an HSDP plan for a launcher that writes no shard groups."""
    if plan.candidate.dp_replicate > 1:
        raise refuse(fmt, f'the plan runs HSDP (dp_replicate {plan.candidate.dp_replicate}); '
                     f'{fmt} writes no replicated FSDP shard groups',
                     'export it as accelerate, hf, lightning, llamafactory, torchrun, slurm '
                     'or torchtitan')


def precision_kind(plan: PlanFile) -> str:
    """The plan's precision recipe as a launcher sees it.

    Returns ``bf16`` or ``fp16`` (mixed precision, however the master weights are
    kept), ``fp32``, ``tf32``, ``fp8`` or ``bf16-pure`` (weights and states in bf16).
    """
    return {'amp-bf16': 'bf16', 'bf16-mixed': 'bf16', 'amp-fp16': 'fp16',
            'fp16-mixed': 'fp16', 'fp32': 'fp32', 'tf32': 'tf32', 'fp8': 'fp8',
            'bf16': 'bf16-pure', 'fsdp-bf16': 'bf16', 'ds-bf16': 'bf16',
            'fsdp-fp8': 'fp8'}[plan.candidate.precision]


def learning_rate(plan: PlanFile) -> float | None:
    """The plan's peak learning rate to 3 significant digits (as people write them)."""
    lr = plan.guidance.learning_rate
    return None if lr is None else float(f'{lr:.3g}')


# PEFT / LLaMA-Factory module names of LoraSpec.adapted()'s projections (Llama and Phi-3
# naming: every Hugging Face decoder batchfit has a preset for but GPT-2 and GPT-NeoX).
PEFT_MODULES = {'q': 'q_proj', 'k': 'k_proj', 'v': 'v_proj', 'o': 'o_proj',
                'qkv': 'qkv_proj', 'gate': 'gate_proj', 'up': 'up_proj',
                'gate_up': 'gate_up_proj', 'down': 'down_proj'}
ALL_TARGETS = frozenset(('q', 'k', 'v', 'o', 'gate', 'up', 'down'))


def lora_modules(plan: PlanFile) -> list[str] | None:
    """The adapted modules' names for PEFT's ``target_modules``; None for every linear
    layer of the decoder (PEFT's ``'all-linear'``, LLaMA-Factory's ``all``)."""
    spec = plan.constraints.lora_spec
    if spec is None or set(spec.targets) >= ALL_TARGETS:
        return None
    return [PEFT_MODULES[name] for name in spec.adapted(plan.model.spec)]


def refuse_lora(plan: PlanFile, fmt: str, tool: str) -> None:
    """Refuse a LoRA plan for a launcher whose trainer has no LoRA."""
    if plan.constraints.lora is not None:
        raise refuse(fmt, f'the plan fine-tunes LoRA adapters; {tool} trains every weight '
                     '(no LoRA in its trainer)',
                     'export it as hf, accelerate, deepspeed, torchrun, lightning, slurm or '
                     'llamafactory')


def lora_notes(plan: PlanFile) -> list[str]:
    """What a training script must do to train the plan's LoRA adapters with PEFT.

    The exact ``LoraConfig`` (and ``BitsAndBytesConfig`` for a quantized base) the
    plan's memory and time were estimated for; nothing for full training.
    """
    spec = plan.constraints.lora_spec
    if spec is None:
        return []
    dtype = 'torch.float16' if precision_kind(plan) == 'fp16' else 'torch.bfloat16'
    modules = lora_modules(plan)
    targets = "'all-linear'" if modules is None else repr(modules)
    load = f'torch_dtype={dtype}' if spec.base_bits != 32 else 'torch_dtype=torch.float32'
    if spec.base_bits == 4:
        storage = (f', bnb_4bit_quant_storage={dtype}' if plan.candidate.zero == 3 else '')
        load = ("quantization_config=BitsAndBytesConfig(load_in_4bit=True, "
                "bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True, "
                f'bnb_4bit_compute_dtype={dtype}{storage}), {load}')
    elif spec.base_bits == 8:
        load = f'quantization_config=BitsAndBytesConfig(load_in_8bit=True), {load}'
    notes = [f'LoRA rank {spec.rank} ({", ".join(spec.targets)}; base {spec.base_bits}-bit): '
             f'load the base with AutoModelForCausalLM.from_pretrained(..., {load}), then '
             f'model = get_peft_model(model, LoraConfig(r={spec.rank}, '
             f"target_modules={targets}, task_type='CAUSAL_LM')) in your training script "
             "(adapters in fp32, lora_dropout 0: PEFT's defaults, as planned)"]
    if plan.candidate.recompute != 'none':
        notes.append('LoRA with activation checkpointing: call model.enable_input_require_grads() '
                     "or pass gradient_checkpointing_kwargs={'use_reentrant': False}, else the "
                     'frozen embedding output gives the checkpointed layers no gradient')
    if plan.model.spec.fused_qkv and not plan.model.spec.fused_gate_up and modules is not None:
        notes.append('LoRA module names follow Llama/Phi-3 (q_proj, ...): GPT-2 names them '
                     'c_attn, c_proj and c_fc, GPT-NeoX query_key_value, dense, dense_h_to_4h '
                     'and dense_4h_to_h')
    return notes


def chunked_loss(plan: PlanFile) -> bool:
    """Whether the plan counts Liger's fused linear cross-entropy (``--loss chunked``): no
    b·s·vocab logits, so a launch without it needs more memory than planned."""
    return plan.constraints.loss == 'chunked'


def liger_notes(plan: PlanFile) -> list[str]:
    """What the user's own script must do to run the plan's chunked loss (nothing for
    another loss).

    Liger's ``AutoLigerKernelForCausalLM`` applies the family's ``apply_liger_kernel_to_*``
    before building the model (linkedin/Liger-Kernel
    src/liger_kernel/transformers/auto_model.py), whose patched forward skips the logits in
    training when labels are given (``skip_logits``: transformers/model/llama.py).
    """
    if not chunked_loss(plan):
        return []
    kind = plan.model.spec.hf_model_type
    return [f"--loss chunked: the plan counts Liger's fused linear cross-entropy (no "
            f'b x s x vocabulary logits): pip install liger-kernel, build the model with '
            f'liger_kernel.transformers.AutoLigerKernelForCausalLM (from_pretrained or '
            f'from_config; or call apply_liger_kernel_to_{kind}() before building it) and '
            'pass it the labels in training mode; without it the job keeps the fp32 logits '
            'and needs more memory than planned']


def refuse_chunked_loss(plan: PlanFile, fmt: str, tool: str, loss: str) -> None:
    """Refuse a ``--loss chunked`` plan for a launcher that runs its own ``loss``."""
    if chunked_loss(plan):
        raise refuse(fmt, f"the plan counts Liger's fused linear cross-entropy (--loss "
                     f'chunked, no b x s x vocabulary logits); {tool} runs its {loss} over '
                     'the whole logits, which needs more memory than planned',
                     'export it as hf, llamafactory, accelerate, torchrun, lightning, '
                     'deepspeed or slurm, or re-plan without --loss chunked')


def header(plan: PlanFile, n: BatchNumbers, tool: str) -> list[str]:
    """The lines every export starts with (as comment text)."""
    c, m = plan.candidate, plan.model
    name = m.spec.name + (f' ({m.ref})' if m.ref and m.ref != m.spec.name else '')
    g = plan.guidance
    lines = [
        f'batchfit plan exported for {tool}: {name}, {m.spec.total_params() / 1e9:,.2f} B '
        f'parameters, sequence {plan.targets.seq_len}',
        f'{n.nodes} node(s) x {n.gpus_per_node} {plan.cluster.gpu_name or plan.cluster.gpu}; '
        f'tp/pp/cp/dp {c.layout}; ZeRO {c.zero}; recompute {c.recompute}; '
        f'{plan.candidate.precision}; stack {plan.candidate.framework}',
        f'global batch {n.global_batch} = micro-batch {n.micro_batch} x accumulation '
        f'{n.grad_accum} x DP {n.dp}',
    ]
    spec = plan.constraints.lora_spec
    if spec is not None:
        lines.append(f'LoRA fine-tuning: rank {spec.rank} on {",".join(spec.targets)}, '
                     f'{spec.base_bits}-bit frozen base')
    if chunked_loss(plan):
        lines.append("loss: Liger's fused linear cross-entropy (--loss chunked)")
    if g.learning_rate is not None:
        lines.append(f'learning rate {learning_rate(plan)}: {g.learning_rate_source}')
    if g.warmup_steps is not None:
        lines.append(f'warmup {g.warmup_steps} steps: {g.warmup_note}')
    if plan.steps is not None:
        lines.append(f'{plan.steps:,} optimizer steps')
    return lines


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InputError(flag, f'unknown value {value!r}', ', '.join(allowed))


def _flag(name: str) -> str:
    return '--' + name.replace('_', '-')
