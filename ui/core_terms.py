"""English texts of the Qt-free core (``planner``) that the UI shows, made translatable.

``planner`` never imports Qt, so its labels stay English there (the CLI and the JSON
outputs use them as they are). This module lists them under the context ``Core`` with
``QT_TRANSLATE_NOOP`` so lupdate extracts them, and :func:`core_text` translates one at
display time.

Two kinds:

* :data:`TERMS`: fixed strings (memory part labels, phase and step-time part names,
  recompute modes, precision and optimizer descriptions, exporter summaries, calibration
  stages, fixed guidance notes). tests/ui/test_i18n.py checks that every label the core
  defines is here, so a new core label without a translation fails CI.
* :data:`MESSAGE_TEMPLATES`: the templates of sentences the core builds with values in
  them (guidance warnings and notes, NVML start-up failures, a calibration time-out), by
  message id. The core hands them over as :class:`planner.messages.Message`: the English
  text plus the id and the formatted values, so the app translates the template by id
  and fills in the values (themselves passed through :func:`core_text`, so a nested
  fixed term is translated too). tests/ui/test_i18n.py checks these copies against
  ``planner.messages.MESSAGES``.
* :data:`PLAIN_SENTENCES`: the calibration child's progress sentences, which arrive as
  plain text over JSON lines. Only these are recognised by their English text (each
  ``{name}`` field matches any text; :func:`match_sentence`).

Not here on purpose: :class:`planner.errors.InputError` messages and other free-form
error texts (file paths, exception texts, exporter notes). They stay English: they are
precise, carry flag names (``--seq-len``) and are what a bug report or a search needs.
"""

from __future__ import annotations

import re
from functools import cache

from planner.messages import Message
from ui.i18n import QT_TRANSLATE_NOOP, translate

CONTEXT = 'Core'

TERMS: tuple[str, ...] = (
    # planner.memory.report.COMPONENT_LABELS and OVERHEAD_LABELS: memory parts
    QT_TRANSLATE_NOOP('Core', 'weights'),
    QT_TRANSLATE_NOOP('Core', 'gradients'),
    QT_TRANSLATE_NOOP('Core', 'optimizer states (+ master)'),
    QT_TRANSLATE_NOOP('Core', 'optimizer step temporaries'),
    QT_TRANSLATE_NOOP('Core', 'activations'),
    QT_TRANSLATE_NOOP('Core', 'logits and loss buffers'),
    QT_TRANSLATE_NOOP('Core', 'model output held by the loop'),
    QT_TRANSLATE_NOOP('Core', 'eager attention scores (transient)'),
    QT_TRANSLATE_NOOP('Core', 'forward temporaries'),
    QT_TRANSLATE_NOOP('Core', 'autocast weight copies'),
    QT_TRANSLATE_NOOP('Core', 'backward temporaries'),
    QT_TRANSLATE_NOOP('Core', 'ZeRO-3 gathered layers'),
    QT_TRANSLATE_NOOP('Core', 'unsharded grads before reduce-scatter'),
    QT_TRANSLATE_NOOP('Core', 'DDP/ZeRO buckets'),
    QT_TRANSLATE_NOOP('Core', 'CUDA context'),
    QT_TRANSLATE_NOOP('Core', 'cuBLAS/NCCL workspaces'),
    QT_TRANSLATE_NOOP('Core', 'allocator reserve'),
    # planner.memory.peak.PHASES, shown with spaces for underscores
    QT_TRANSLATE_NOOP('Core', 'forward end'),
    QT_TRANSLATE_NOOP('Core', 'backward start'),
    QT_TRANSLATE_NOOP('Core', 'backward end'),
    QT_TRANSLATE_NOOP('Core', 'optimizer step'),
    # Candidate.step_breakdown_s keys, without '_s' and with spaces
    QT_TRANSLATE_NOOP('Core', 'compute'),
    QT_TRANSLATE_NOOP('Core', 'elementwise'),
    QT_TRANSLATE_NOOP('Core', 'bubble'),
    QT_TRANSLATE_NOOP('Core', 'tp comm'),
    QT_TRANSLATE_NOOP('Core', 'cp comm'),
    QT_TRANSLATE_NOOP('Core', 'pp comm'),
    QT_TRANSLATE_NOOP('Core', 'dp comm'),
    QT_TRANSLATE_NOOP('Core', 'ep comm'),
    # each stack's own words for its recompute modes (planner.stacks catalog)
    QT_TRANSLATE_NOOP('Core', 'off'),
    QT_TRANSLATE_NOOP('Core', 'gradient checkpointing (whole layers)'),
    QT_TRANSLATE_NOOP('Core', 'activation checkpointing (whole layers)'),
    QT_TRANSLATE_NOOP('Core', 'selective (op-level SAC)'),
    QT_TRANSLATE_NOOP('Core', 'selective (core attention)'),
    QT_TRANSLATE_NOOP('Core', 'full (uniform, every layer)'),
    QT_TRANSLATE_NOOP('Core', 'selective (every 2nd layer)'),
    QT_TRANSLATE_NOOP('Core', "full, block (half of each chunk's layers)"),
    QT_TRANSLATE_NOOP('Core', 'optimizer'),
    QT_TRANSLATE_NOOP('Core', 'overhead'),
    # planner.timing.step_time.RECOMPUTE_MODES
    QT_TRANSLATE_NOOP('Core', 'none'),
    QT_TRANSLATE_NOOP('Core', 'selective'),
    QT_TRANSLATE_NOOP('Core', 'full'),
    QT_TRANSLATE_NOOP('Core', 'half'),
    # planner.memory.recipes.RECIPES descriptions
    QT_TRANSLATE_NOOP('Core', 'everything in fp32, as plain PyTorch (16 B/param with Adam)'),
    QT_TRANSLATE_NOOP('Core', 'fp32 tensors, matmuls on TF32 tensor cores'),
    QT_TRANSLATE_NOOP('Core', 'torch.autocast(bf16) over fp32 parameters (HF Trainer --bf16)'),
    QT_TRANSLATE_NOOP('Core', 'torch.autocast(fp16) over fp32 parameters with a GradScaler'),
    QT_TRANSLATE_NOOP('Core', 'FSDP2 MixedPrecisionPolicy: fp32 sharded weights, grads and Adam '
                              '(16 B/param over d), bf16 all-gather and compute, no autocast'),
    QT_TRANSLATE_NOOP('Core', 'DeepSpeed bf16: bf16 weights and grads, fp32 master + Adam, an fp32 '
                              'gradient accumulation buffer with ZeRO 0-1'),
    QT_TRANSLATE_NOOP('Core', 'Megatron/DeepSpeed: bf16 weights, fp32 grads and master '
                              '(18 B/param)'),
    QT_TRANSLATE_NOOP('Core', 'ZeRO paper mixed precision: fp16 weights and grads, fp32 master '
                              '+ Adam (16 B/param, K=12)'),
    QT_TRANSLATE_NOOP('Core', 'pure bf16: weights, grads and optimizer states in bf16 '
                              '(8 B/param)'),
    QT_TRANSLATE_NOOP('Core', 'Transformer Engine fp8 matmuls over bf16-mixed (18 B/param + '
                              'fp8 weight copies)'),
    QT_TRANSLATE_NOOP('Core', 'torchtitan float8: FSDP2 MixedPrecisionPolicy (fp32 shards, bf16 '
                              'compute) with torchao Float8Linear layers (tensorwise, fp8 '
                              'all-gather)'),
    QT_TRANSLATE_NOOP('Core', 'FSDP2 MixedPrecisionPolicy: fp32 sharded weights, grads and Adam '
                              '(16 B/param over d), bf16 all-gather and compute, no autocast'),
    QT_TRANSLATE_NOOP('Core', 'DeepSpeed bf16: bf16 weights and grads, fp32 master + Adam, an '
                              'fp32 gradient accumulation buffer with ZeRO 0-1'),
    # planner.stacks.STACKS labels and descriptions
    QT_TRANSLATE_NOOP('Core', 'Hugging Face'),
    QT_TRANSLATE_NOOP('Core', 'HF + DeepSpeed'),
    QT_TRANSLATE_NOOP('Core', 'torchtitan'),
    QT_TRANSLATE_NOOP('Core', 'Megatron-LM'),
    QT_TRANSLATE_NOOP('Core', 'DeepSpeed pipeline'),
    QT_TRANSLATE_NOOP('Core', 'HF Trainer / accelerate: DDP with autocast, or FSDP2; whole-layer '
                              'checkpointing; data parallel only'),
    QT_TRANSLATE_NOOP('Core', 'HF Trainer with DeepSpeed ZeRO 0-3: bf16 module, fp32 master and '
                              'states, no autocast'),
    QT_TRANSLATE_NOOP('Core', 'FSDP2/HSDP x TP x PP x CP x EP, bf16 parameters with fp32 '
                              'reduction, no autocast'),
    QT_TRANSLATE_NOOP('Core', 'Megatron-Core: TP+SP, PP+VPP, CP, EP, distributed optimizer '
                              '(ZeRO-1), Transformer Engine kernels'),
    QT_TRANSLATE_NOOP('Core', 'DeepSpeed engine with its pipeline: TP, PP (1F1B), ZeRO 0-1'),
    # planner.memory.recipes.OPTIMIZERS descriptions
    QT_TRANSLATE_NOOP('Core', 'AdamW: first and second moments'),
    QT_TRANSLATE_NOOP('Core', 'Adam: first and second moments'),
    QT_TRANSLATE_NOOP('Core', 'bitsandbytes 8-bit AdamW: block-quantised moments'),
    QT_TRANSLATE_NOOP('Core', 'SGD with momentum: one buffer'),
    QT_TRANSLATE_NOOP('Core', 'plain SGD: no state'),
    QT_TRANSLATE_NOOP('Core', 'Adafactor without first moment: factored second moment'),
    # planner.export.EXPORTERS summaries
    QT_TRANSLATE_NOOP('Core', 'torchrun launch script (single or multi-node, static or c10d)'),
    QT_TRANSLATE_NOOP('Core', 'accelerate launch script with its config YAML (DDP, FSDP, '
                              'DeepSpeed)'),
    QT_TRANSLATE_NOOP('Core', 'DeepSpeed config JSON'),
    QT_TRANSLATE_NOOP('Core', 'Hugging Face Trainer arguments under torchrun'),
    QT_TRANSLATE_NOOP('Core', 'Megatron-LM pretrain_gpt.py arguments under torchrun'),
    QT_TRANSLATE_NOOP('Core', 'PyTorch Lightning Trainer settings (LightningCLI YAML)'),
    QT_TRANSLATE_NOOP('Core', 'torchtitan job config (TOML)'),
    QT_TRANSLATE_NOOP('Core', 'LLaMA-Factory training YAML'),
    QT_TRANSLATE_NOOP('Core', 'Slurm batch script: srun + torchrun with c10d rendezvous'),
    # planner.plans.guidance: critical-batch sources, LR rules, warmup and notes
    QT_TRANSLATE_NOOP('Core', 'gradient noise scale given (--b-noise)'),
    QT_TRANSLATE_NOOP('Core', 'DeepSeek B_opt (no --b-noise given)'),
    QT_TRANSLATE_NOOP('Core', 'unknown (give --b-noise or a data size)'),
    QT_TRANSLATE_NOOP('Core', 'linear rule with warmup (Goyal et al. 2017)'),
    QT_TRANSLATE_NOOP('Core', 'square-root rule (Adam SDE, Malladi et al. 2022)'),
    QT_TRANSLATE_NOOP('Core', 'GPT-3 warmed up over 375M tokens (Brown et al. 2020)'),
    QT_TRANSLATE_NOOP('Core', 'the scaling rules hold below the critical batch; above it '
                              'larger LRs stop paying off (McCandlish et al. 2018)'),
    QT_TRANSLATE_NOOP('Core', 'LoRA: the DeepSeek law is fitted on full pretraining, and LoRA '
                              'recipes train at higher learning rates (QLoRA: 2e-4 up to 13B, '
                              "1e-4 above; LLaMA-Factory's LoRA examples 1e-4 where full "
                              'fine-tuning uses 1e-5): give --base-lr and --base-batch from a '
                              'LoRA recipe'),
    # planner.hardware.local.nvml: what the app does without NVML
    QT_TRANSLATE_NOOP('Core', 'batchfit uses the catalog instead'),
    # planner.calibrate: stages and fixed progress messages
    QT_TRANSLATE_NOOP('Core', 'environment'),
    QT_TRANSLATE_NOOP('Core', 'matmul'),
    QT_TRANSLATE_NOOP('Core', 'proxy'),
    QT_TRANSLATE_NOOP('Core', 'max_micro_batch'),
    QT_TRANSLATE_NOOP('Core', 'collectives'),
    QT_TRANSLATE_NOOP('Core', 'fit'),
    QT_TRANSLATE_NOOP('Core', 'predicting'),
    QT_TRANSLATE_NOOP('Core', 'fitting the step-time model'),
    QT_TRANSLATE_NOOP('Core', 'done'),
    QT_TRANSLATE_NOOP('Core', 'all-reduce sweep'),
    QT_TRANSLATE_NOOP('Core', 'all-reduce sweep done'),
    QT_TRANSLATE_NOOP('Core', 'calibration finished'),
    QT_TRANSLATE_NOOP('Core', 'calibration cancelled'),
)

# The core's message templates by id (planner.messages.MESSAGES, copied here so lupdate
# extracts them; tests/ui/test_i18n.py checks the two agree). A core Message carries its
# id and arguments: it is translated by id, never by matching its English text.
MESSAGE_TEMPLATES: dict[str, str] = {
    # planner.plans.guidance.advise warnings
    'guidance.above_critical': QT_TRANSLATE_NOOP(
        'Core', 'global batch {batch}M tokens is {ratio}x the critical batch ({critical}M, '
                '{source}): more GPUs, little speed-up. Reaching a given loss takes {data}x '
                'the minimum data, and doubling the batch again would cut the steps only to '
                '{steps}'),
    'guidance.low_efficiency_gemm': QT_TRANSLATE_NOOP(
        'Core', 'micro-batch {micro} ({gflop} GFLOP GEMMs per GPU) reaches only {fraction} of '
                'the efficiency this GPU attains on large GEMMs: a larger micro-batch or less '
                'tensor parallelism would use it better'),
    'guidance.low_efficiency': QT_TRANSLATE_NOOP(
        'Core', 'micro-batch {micro} reaches only {fraction} of the efficiency this GPU '
                'attains on large GEMMs: a larger micro-batch or less tensor parallelism '
                'would use it better'),
    'guidance.deep_accumulation_timed': QT_TRANSLATE_NOOP(
        'Core', '{accum} micro-batches accumulated per step ({seconds} s per step): each '
                'optimizer step is slow; more data-parallel GPUs or a smaller global batch '
                'would give more updates per hour'),
    'guidance.deep_accumulation': QT_TRANSLATE_NOOP(
        'Core', '{accum} micro-batches accumulated per step: each optimizer step is slow; '
                'more data-parallel GPUs or a smaller global batch would give more updates '
                'per hour'),
    # planner.plans.guidance.advise notes and the warmup note
    'guidance.deepseek': QT_TRANSLATE_NOOP(
        'Core', 'DeepSeek scaling law at C = {compute} FLOPs: B_opt ~ {batch}M tokens, '
                'LR_opt ~ {lr} (AdamW, fitted on their data; a starting point, not a '
                'guarantee)'),
    'guidance.below_critical': QT_TRANSLATE_NOOP(
        'Core', 'global batch is {ratio}x below the critical batch: more data-parallel GPUs '
                'would still speed training up almost linearly'),
    'guidance.warmup_capped': QT_TRANSLATE_NOOP('Core', '{note}; capped at 10 % of the run'),
    'guidance.warmup_reference': QT_TRANSLATE_NOOP(
        'Core', 'the reference warmup ({steps} steps of {tokens} tokens) kept in tokens'),
    # planner.hardware.local.nvml start-up failures (GpuPanel shows them when there is no GPU)
    'nvml.no_driver': QT_TRANSLATE_NOOP(
        'Core', 'no NVIDIA driver found (libnvidia-ml.so): this machine has no NVIDIA GPU or '
                'the driver is not installed; {fallback}'),
    'nvml.driver_not_loaded': QT_TRANSLATE_NOOP(
        'Core', 'the NVIDIA driver is installed but its kernel module is not loaded (NVML: '
                'Driver Not Loaded): run sudo modprobe nvidia or reboot; {fallback}'),
    'nvml.version_mismatch': QT_TRANSLATE_NOOP(
        'Core', 'the NVIDIA driver library and the loaded kernel module are different '
                'versions, usually after a driver upgrade without a reboot: reboot, or reload '
                'the nvidia kernel modules; {fallback}'),
    'nvml.no_permission': QT_TRANSLATE_NOOP(
        'Core', 'no permission to open the NVIDIA devices (/dev/nvidia*): add your user to '
                'the group that owns them, or in a container pass the GPUs in (docker run '
                '--gpus all); {fallback}'),
    'nvml.failed': QT_TRANSLATE_NOOP(
        'Core', 'NVML failed to start ({reason}): nvidia-smi shows whether the driver works; '
                '{fallback}'),
    'nvml.no_gpus': QT_TRANSLATE_NOOP(
        'Core', 'the NVIDIA driver {driver} is loaded but lists no GPUs (nvidia-smi -L lists '
                'what it sees; a container needs --gpus); {fallback}'),
    # planner.calibrate.runner: the outcome of a run
    'calibrate.timed_out': QT_TRANSLATE_NOOP(
        'Core', 'calibration timed out after {seconds} s and was stopped'),
}

# Sentences that reach the app as plain text, without an id: the calibration child's
# progress, which crosses a process boundary as JSON lines. Each {name} field matches any
# text. With the message templates they are every sentence template (SENTENCES); longer
# or more specific templates first, as the first full match wins.
PLAIN_SENTENCES: tuple[str, ...] = (
    # planner.calibrate progress (written by the child)
    QT_TRANSLATE_NOOP('Core', '{layers}-layer proxy: memory at micro-batch {micro}'),
    QT_TRANSLATE_NOOP('Core', '{layers}-layer proxy: timing'),
    QT_TRANSLATE_NOOP('Core', 'probing micro-batch {micro}'),
    QT_TRANSLATE_NOOP('Core', 'largest micro-batch {micro}'),
    QT_TRANSLATE_NOOP('Core', 'best GEMM {tflops} TFLOP/s'),
    QT_TRANSLATE_NOOP('Core', '{gemm} at {tokens} tokens'),
    QT_TRANSLATE_NOOP('Core', '{device}: starting'),
)
SENTENCES: tuple[str, ...] = (*MESSAGE_TEMPLATES.values(), *PLAIN_SENTENCES)

_TERM_SET = frozenset(TERMS)
_FIELD = re.compile(r'\{(\w+)\}')


@cache
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Each template with a regex that matches the sentences it stands for."""
    out = []
    for template in SENTENCES:
        pieces = _FIELD.split(template)  # literal, name, literal, name, ..., literal
        regex = ''.join(re.escape(p) if i % 2 == 0 else f'(?P<{p}>.*?)'
                        for i, p in enumerate(pieces))
        out.append((template, re.compile(regex, re.DOTALL)))
    return tuple(out)


def match_sentence(text: str) -> tuple[str, dict[str, str]] | None:
    """The template ``text`` is an instance of, with its field values (None if none)."""
    for template, regex in _patterns():
        m = regex.fullmatch(text)
        if m is not None:
            return template, m.groupdict()
    return None


def _message_text(message: Message) -> str:
    """A core :class:`~planner.messages.Message`, translated by its id."""
    template = MESSAGE_TEMPLATES.get(message.id)
    if template is None:
        return message
    translated = translate(CONTEXT, template)
    if translated == template:
        return message
    try:
        return translated.format(**{k: _argument_text(v) for k, v in message.args.items()})
    except (KeyError, IndexError, ValueError):  # a broken translation: keep the original
        return message


def _argument_text(value: str) -> str:
    """A message's argument: a nested message or a fixed term translated, else as it is."""
    if isinstance(value, Message):
        return _message_text(value)
    return translate(CONTEXT, value) if value in _TERM_SET else value


def core_text(text: str) -> str:
    """``text`` from the core in the UI language; unknown texts come back unchanged.

    A fixed term goes through ``translate('Core', text)``; a sentence matching a
    :data:`SENTENCES` template is rebuilt from the translated template. Without a
    translator (English) the result is always ``text`` itself.
    """
    if not text:
        return text
    if isinstance(text, Message):
        return _message_text(text)
    if text in _TERM_SET:
        return translate(CONTEXT, text)
    found = match_sentence(text)
    if found is None:
        return text
    template, fields = found
    translated = translate(CONTEXT, template)
    if translated == template:
        return text
    try:
        return translated.format(**{k: core_text(v) for k, v in fields.items()})
    except (KeyError, IndexError, ValueError):  # a broken translation: keep the original
        return text
