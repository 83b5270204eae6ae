"""Sentences the core builds with values in them, as a message id plus arguments.

A :class:`Message` is a ``str`` (its English text, so the CLI, JSON documents and logs
use it unchanged) that also carries the id of its template in :data:`MESSAGES` and the
values it was filled with. The app translates the template by id and fills in the same
values (``ui/core_terms.py``); it never has to recognise an English sentence.

Values are formatted by the code that builds the message (``f'{x:,.2f}'``), so the
English text is exactly what it was as an f-string, and a translation only reorders
fields.
"""

from __future__ import annotations

from typing import Any

# id -> English template; fields are {name} (values arrive already formatted).
MESSAGES: dict[str, str] = {
    # planner.plans.guidance.advise: warnings
    'guidance.above_critical': (
        'global batch {batch}M tokens is {ratio}x the critical batch ({critical}M, {source}): '
        'more GPUs, little speed-up. Reaching a given loss takes {data}x the minimum data, '
        'and doubling the batch again would cut the steps only to {steps}'),
    'guidance.low_efficiency_gemm': (
        'micro-batch {micro} ({gflop} GFLOP GEMMs per GPU) reaches only {fraction} of the '
        'efficiency this GPU attains on large GEMMs: a larger micro-batch or less tensor '
        'parallelism would use it better'),
    'guidance.low_efficiency': (
        'micro-batch {micro} reaches only {fraction} of the efficiency this GPU attains on '
        'large GEMMs: a larger micro-batch or less tensor parallelism would use it better'),
    'guidance.deep_accumulation_timed': (
        '{accum} micro-batches accumulated per step ({seconds} s per step): each optimizer '
        'step is slow; more data-parallel GPUs or a smaller global batch would give more '
        'updates per hour'),
    'guidance.deep_accumulation': (
        '{accum} micro-batches accumulated per step: each optimizer step is slow; more '
        'data-parallel GPUs or a smaller global batch would give more updates per hour'),
    # planner.plans.guidance.advise: notes, and the warmup note
    'guidance.deepseek': (
        'DeepSeek scaling law at C = {compute} FLOPs: B_opt ~ {batch}M tokens, LR_opt ~ {lr} '
        '(AdamW, fitted on their data; a starting point, not a guarantee)'),
    'guidance.below_critical': (
        'global batch is {ratio}x below the critical batch: more data-parallel GPUs would '
        'still speed training up almost linearly'),
    'guidance.warmup_capped': '{note}; capped at 10 % of the run',
    'guidance.warmup_reference': (
        'the reference warmup ({steps} steps of {tokens} tokens) kept in tokens'),
    # planner.hardware.local.nvml: start-up failures
    'nvml.no_driver': (
        'no NVIDIA driver found (libnvidia-ml.so): this machine has no NVIDIA GPU or the '
        'driver is not installed; {fallback}'),
    'nvml.driver_not_loaded': (
        'the NVIDIA driver is installed but its kernel module is not loaded (NVML: Driver '
        'Not Loaded): run sudo modprobe nvidia or reboot; {fallback}'),
    'nvml.version_mismatch': (
        'the NVIDIA driver library and the loaded kernel module are different versions, '
        'usually after a driver upgrade without a reboot: reboot, or reload the nvidia '
        'kernel modules; {fallback}'),
    'nvml.no_permission': (
        'no permission to open the NVIDIA devices (/dev/nvidia*): add your user to the group '
        'that owns them, or in a container pass the GPUs in (docker run --gpus all); '
        '{fallback}'),
    'nvml.failed': (
        'NVML failed to start ({reason}): nvidia-smi shows whether the driver works; '
        '{fallback}'),
    'nvml.no_gpus': (
        'the NVIDIA driver {driver} is loaded but lists no GPUs (nvidia-smi -L lists what it '
        'sees; a container needs --gpus); {fallback}'),
    # planner.calibrate.runner: the outcome of a run
    'calibrate.timed_out': 'calibration timed out after {seconds} s and was stopped',
}


class Message(str):
    """A core sentence: its English text, plus ``id`` and ``args`` for a translator.

    Attributes:
        id: the key of its template in :data:`MESSAGES`.
        args: the formatted values of the template's fields (a value may itself be a
            :class:`Message` or a fixed term the app translates).
    """

    id: str
    args: dict[str, str]

    def __new__(cls, message_id: str, /, **args: Any) -> Message:
        values = {k: v if isinstance(v, str) else str(v) for k, v in args.items()}
        self = super().__new__(cls, MESSAGES[message_id].format(**values))
        self.id = message_id
        self.args = values
        return self

    @property
    def template(self) -> str:
        """The English template the text was built from."""
        return MESSAGES[self.id]

    def __reduce__(self) -> tuple[Any, ...]:
        # copy, deepcopy (dataclasses.asdict) and pickle rebuild it from id and args
        return (_rebuild, (self.id, self.args))


def _rebuild(message_id: str, args: dict[str, str]) -> Message:
    return Message(message_id, **args)
