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
* :data:`SENTENCES`: templates of sentences the core builds with numbers in them
  (guidance warnings and notes, NVML start-up failures, calibration progress). Each
  ``{name}`` field matches any text; a matching sentence is rebuilt from the translated
  template with its fields (themselves passed through :func:`core_text`, so a nested
  fixed term is translated too). The templates are copies of the core's f-strings; the
  test feeds real core output through them, so a reworded core sentence fails CI instead
  of silently showing English.

Not here on purpose: :class:`planner.errors.InputError` messages and other free-form
error texts (file paths, exception texts, exporter notes). They stay English: they are
precise, carry flag names (``--seq-len``) and are what a bug report or a search needs.
"""

from __future__ import annotations

import re
from functools import cache

from PySide6.QtCore import QT_TRANSLATE_NOOP

from ui.i18n import translate

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
    QT_TRANSLATE_NOOP('Core', 'optimizer'),
    QT_TRANSLATE_NOOP('Core', 'overhead'),
    # planner.timing.step_time.RECOMPUTE_MODES
    QT_TRANSLATE_NOOP('Core', 'none'),
    QT_TRANSLATE_NOOP('Core', 'selective'),
    QT_TRANSLATE_NOOP('Core', 'full'),
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

# Longer or more specific templates first: the first full match wins.
SENTENCES: tuple[str, ...] = (
    # planner.plans.guidance.advise warnings
    QT_TRANSLATE_NOOP('Core', 'global batch {batch}M tokens is {ratio}x the critical batch '
                              '({critical}M, {source}): more GPUs, little speed-up. Reaching a '
                              'given loss takes {data}x the minimum data, and doubling the '
                              'batch again would cut the steps only to {steps}'),
    QT_TRANSLATE_NOOP('Core', 'micro-batch {micro} ({gflop} GFLOP GEMMs per GPU) reaches only '
                              '{fraction} of the efficiency this GPU attains on large GEMMs: a '
                              'larger micro-batch or less tensor parallelism would use it '
                              'better'),
    QT_TRANSLATE_NOOP('Core', 'micro-batch {micro} reaches only {fraction} of the efficiency '
                              'this GPU attains on large GEMMs: a larger micro-batch or less '
                              'tensor parallelism would use it better'),
    QT_TRANSLATE_NOOP('Core', '{accum} micro-batches accumulated per step ({seconds} s per '
                              'step): each optimizer step is slow; more data-parallel GPUs or a '
                              'smaller global batch would give more updates per hour'),
    QT_TRANSLATE_NOOP('Core', '{accum} micro-batches accumulated per step: each optimizer step '
                              'is slow; more data-parallel GPUs or a smaller global batch would '
                              'give more updates per hour'),
    # planner.plans.guidance.advise notes and the warmup note
    QT_TRANSLATE_NOOP('Core', 'DeepSeek scaling law at C = {compute} FLOPs: B_opt ~ {batch}M '
                              'tokens, LR_opt ~ {lr} (AdamW, fitted on their data; a starting '
                              'point, not a guarantee)'),
    QT_TRANSLATE_NOOP('Core', 'global batch is {ratio}x below the critical batch: more '
                              'data-parallel GPUs would still speed training up almost '
                              'linearly'),
    QT_TRANSLATE_NOOP('Core', '{note}; capped at 10 % of the run'),
    QT_TRANSLATE_NOOP('Core', 'the reference warmup ({steps} steps of {tokens} tokens) kept in '
                              'tokens'),
    # planner.hardware.local.nvml start-up failures (GpuPanel shows them when there is no GPU)
    QT_TRANSLATE_NOOP('Core', 'no NVIDIA driver found (libnvidia-ml.so): this machine has no '
                              'NVIDIA GPU or the driver is not installed; {fallback}'),
    QT_TRANSLATE_NOOP('Core', 'the NVIDIA driver is installed but its kernel module is not '
                              'loaded (NVML: Driver Not Loaded): run sudo modprobe nvidia or '
                              'reboot; {fallback}'),
    QT_TRANSLATE_NOOP('Core', 'the NVIDIA driver library and the loaded kernel module are '
                              'different versions, usually after a driver upgrade without a '
                              'reboot: reboot, or reload the nvidia kernel modules; '
                              '{fallback}'),
    QT_TRANSLATE_NOOP('Core', 'no permission to open the NVIDIA devices (/dev/nvidia*): add '
                              'your user to the group that owns them, or in a container pass '
                              'the GPUs in (docker run --gpus all); {fallback}'),
    QT_TRANSLATE_NOOP('Core', 'NVML failed to start ({reason}): nvidia-smi shows whether the '
                              'driver works; {fallback}'),
    QT_TRANSLATE_NOOP('Core', 'the NVIDIA driver {driver} is loaded but lists no GPUs '
                              '(nvidia-smi -L lists what it sees; a container needs --gpus); '
                              '{fallback}'),
    # planner.calibrate progress and outcome
    QT_TRANSLATE_NOOP('Core', 'calibration timed out after {seconds} s and was stopped'),
    QT_TRANSLATE_NOOP('Core', '{layers}-layer proxy: memory at micro-batch {micro}'),
    QT_TRANSLATE_NOOP('Core', '{layers}-layer proxy: timing'),
    QT_TRANSLATE_NOOP('Core', 'probing micro-batch {micro}'),
    QT_TRANSLATE_NOOP('Core', 'largest micro-batch {micro}'),
    QT_TRANSLATE_NOOP('Core', 'best GEMM {tflops} TFLOP/s'),
    QT_TRANSLATE_NOOP('Core', '{gemm} at {tokens} tokens'),
    QT_TRANSLATE_NOOP('Core', '{device}: starting'),
)

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


def core_text(text: str) -> str:
    """``text`` from the core in the UI language; unknown texts come back unchanged.

    A fixed term goes through ``translate('Core', text)``; a sentence matching a
    :data:`SENTENCES` template is rebuilt from the translated template. Without a
    translator (English) the result is always ``text`` itself.
    """
    if not text:
        return text
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
