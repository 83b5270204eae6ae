"""Is a global batch a good idea? Learning rate, warmup and critical-batch guidance.

Formulas:

* **Learning-rate scaling** from a reference (LR0, B0) to B, with kappa = B / B0:
  linear rule with warmup (Goyal et al. 2017): LR0 * kappa; square-root rule
  (Krizhevsky 2014, Hoffer et al. 2017): LR0 * sqrt(kappa); Adam SDE rule (Malladi et
  al. 2022): LR0 * sqrt(kappa) as well, valid below the critical batch. With a noise
  scale, McCandlish et al.'s eps_opt(B) = eps_max / (1 + B_noise / B) gives a rule
  that is linear far below B_noise and flat far above it.
* **Critical batch** (McCandlish et al. 2018): S(B) = S_min (1 + B_noise / B) steps and
  E(B) = E_min (1 + B / B_noise) examples reach the same loss; B_crit ~ B_noise costs
  2x the minimum of each. Without a measured B_noise the DeepSeek LLM scaling law
  (2024) stands in: B_opt = 0.2920 * C^0.3271 tokens, eta_opt = 0.3118 * C^-0.1250,
  C = M * D with M = 72 L h^2 + 12 L h s non-embedding FLOPs per token.

Batches here are in tokens unless a name says samples; the LR rules only use the
ratio B / B0, so any consistent unit works for them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from planner.errors import InputError
from planner.messages import Message
from planner.models.spec import ModelSpec

# DeepSeek LLM (arXiv 2401.02954), fitted on their data and architecture.
DEEPSEEK_BATCH_COEFF = 0.2920
DEEPSEEK_BATCH_EXP = 0.3271
DEEPSEEK_LR_COEFF = 0.3118
DEEPSEEK_LR_EXP = -0.1250
# GPT-3 (Brown et al. 2020) warmed up linearly over the first 375M tokens.
DEFAULT_WARMUP_TOKENS = 375e6
MAX_WARMUP_FRACTION = 0.10  # never suggest warming up for more than 10 % of the run
# Warning thresholds (documented in docs/time-model.md).
ABOVE_CRITICAL_FACTOR = 2.0  # B > 2 B_crit: doubling B saves < 1/3 of the steps
LOW_EFFICIENCY_FRACTION = 0.8  # micro-batch GEMMs below 80 % of attainable efficiency
DEEP_ACCUMULATION = 32  # micro-batches per step beyond which steps get slow
SGD_OPTIMIZERS = ('sgd', 'sgd-momentum')
# LoRA trains at higher learning rates than full fine-tuning; a pretraining law is no guide.
LORA_LR_NOTE = ('LoRA: the DeepSeek law is fitted on full pretraining, and LoRA recipes train at '
                'higher learning rates (QLoRA: 2e-4 up to 13B, 1e-4 above; LLaMA-Factory\'s '
                'LoRA examples 1e-4 where full fine-tuning uses 1e-5): give --base-lr and '
                '--base-batch from a LoRA recipe')


@dataclass(frozen=True)
class GuidanceInputs:
    """What the learning-rate guidance is given (all optional), checked once here.

    Attributes:
        base_lr: a learning rate known to work at ``base_batch_samples``.
        base_batch_samples: that reference batch, in sequences.
        base_warmup_steps: warmup steps of the reference recipe.
        b_noise_tokens: measured gradient noise scale, in tokens.

    Raises:
        InputError: a reference LR without its batch (or the reverse), or a noise scale
            that is not positive (:func:`scale_learning_rate` checks the values).
    """

    base_lr: float | None = None
    base_batch_samples: float | None = None
    base_warmup_steps: int | None = None
    b_noise_tokens: float | None = None

    def __post_init__(self) -> None:
        if (self.base_lr is None) != (self.base_batch_samples is None):
            raise InputError('--base-lr', 'give --base-lr and --base-batch together')
        if self.b_noise_tokens is not None and not self.b_noise_tokens > 0:
            raise InputError('--b-noise', f'must be positive, got {self.b_noise_tokens!r}')


@dataclass(frozen=True)
class LearningRates:
    """LR for the planned batch under each rule, from a reference (LR0, B0).

    Attributes:
        base_lr: LR0, the reference learning rate.
        base_batch: B0, in the same unit as ``batch``.
        batch: the planned global batch.
        ratio: kappa = batch / base_batch.
        linear: LR0 * kappa (Goyal et al. 2017, with warmup).
        square_root: LR0 * sqrt(kappa) (Krizhevsky 2014; Hoffer et al. 2017).
        adam_sde: LR0 * sqrt(kappa) (Malladi et al. 2022; they also scale 1 - beta by
            kappa and epsilon by 1/sqrt(kappa)).
        noise_scale: LR0 * (1 + B_noise/B0) / (1 + B_noise/B) (McCandlish et al. 2018),
            or None without a noise scale.
        recommended: the rule's value for this optimizer.
        rule: the recommended rule's name.
    """

    base_lr: float
    base_batch: float
    batch: float
    ratio: float
    linear: float
    square_root: float
    adam_sde: float
    noise_scale: float | None
    recommended: float
    rule: str


def scale_learning_rate(base_lr: float, base_batch: float, batch: float,
                        optimizer: str = 'adamw',
                        b_noise: float | None = None) -> LearningRates:
    """Learning rates for ``batch`` from a reference (``base_lr`` at ``base_batch``).

    Args:
        base_lr: reference LR.
        base_batch: reference global batch (same unit as ``batch`` and ``b_noise``).
        batch: planned global batch.
        optimizer: an ``OPTIMIZERS`` key; SGD gets the linear rule, Adam-type
            optimizers the square-root (SDE) rule.
        b_noise: gradient noise scale, for the noise-scale rule.

    Raises:
        InputError: a non-positive LR or batch.
    """
    if not (base_lr > 0 and math.isfinite(base_lr)):
        raise InputError('--base-lr', f'must be a positive number, got {base_lr!r}')
    if not base_batch > 0:
        raise InputError('--base-batch', f'must be positive, got {base_batch!r}')
    kappa = batch / base_batch
    noise = None
    if b_noise is not None:
        noise = base_lr * (1 + b_noise / base_batch) / (1 + b_noise / batch)
    linear, root = base_lr * kappa, base_lr * math.sqrt(kappa)
    if optimizer in SGD_OPTIMIZERS:
        recommended, rule = linear, 'linear rule with warmup (Goyal et al. 2017)'
    else:
        recommended, rule = root, 'square-root rule (Adam SDE, Malladi et al. 2022)'
    return LearningRates(base_lr=base_lr, base_batch=base_batch, batch=batch, ratio=kappa,
                         linear=linear, square_root=root, adam_sde=root, noise_scale=noise,
                         recommended=recommended, rule=rule)


# ---- scaling laws and the critical batch -----------------------------------------------

def deepseek_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """DeepSeek's M: non-embedding FLOPs per token, 72·L·h² + 12·L·h·s."""
    layers, h = model.num_layers, model.hidden_size
    return 72.0 * layers * h * h + 12.0 * layers * h * seq_len


def deepseek_compute_flops(model: ModelSpec, seq_len: int, tokens: float) -> float:
    """C = M · D, the compute budget DeepSeek's laws are expressed in."""
    return deepseek_flops_per_token(model, seq_len) * tokens


def deepseek_optimal_batch_tokens(compute_flops: float) -> float:
    """B_opt = 0.2920 · C^0.3271 tokens (DeepSeek LLM 2024)."""
    return DEEPSEEK_BATCH_COEFF * compute_flops ** DEEPSEEK_BATCH_EXP


def deepseek_optimal_lr(compute_flops: float) -> float:
    """eta_opt = 0.3118 · C^-0.1250 (DeepSeek LLM 2024, AdamW, their schedule)."""
    return DEEPSEEK_LR_COEFF * compute_flops ** DEEPSEEK_LR_EXP


def steps_factor(batch: float, b_noise: float) -> float:
    """S(B) / S_min = 1 + B_noise / B: optimizer steps relative to an infinite batch."""
    return 1.0 + b_noise / batch


def data_factor(batch: float, b_noise: float) -> float:
    """E(B) / E_min = 1 + B / B_noise: training data relative to a tiny batch."""
    return 1.0 + batch / b_noise


def time_to_same_loss_ratio(step_time_a_s: float, batch_a: float, step_time_b_s: float,
                            batch_b: float, b_noise: float) -> float:
    """Time to reach the same loss with plan A over plan B: S(B_a)·t_a / (S(B_b)·t_b).

    Below 1, plan A gets there sooner even if its throughput is lower.
    """
    return (steps_factor(batch_a, b_noise) * step_time_a_s
            / (steps_factor(batch_b, b_noise) * step_time_b_s))


@dataclass(frozen=True)
class BatchPoint:
    """How another global batch would compare (McCandlish et al. 2018).

    Attributes:
        batch_tokens: the global batch.
        relative_steps: steps to the same loss, relative to the planned batch.
        relative_tokens: data to the same loss, relative to the planned batch.
    """

    batch_tokens: float
    relative_steps: float
    relative_tokens: float


@dataclass(frozen=True)
class Guidance:
    """Numbers and warnings about the planned global batch.

    Attributes:
        global_batch_samples: the planned batch in sequences.
        global_batch_tokens: the same in tokens.
        compute_flops: DeepSeek's C for the whole run (None without a data size).
        deepseek_batch_tokens: DeepSeek's B_opt (None without a data size).
        deepseek_lr: DeepSeek's eta_opt (None without a data size).
        critical_batch_tokens: B_noise given by the user, else DeepSeek's B_opt as a
            stand-in (None when neither is known).
        critical_batch_source: where ``critical_batch_tokens`` comes from.
        steps_factor: S(B)/S_min at the planned batch.
        data_factor: E(B)/E_min at the planned batch.
        batch_table: the planned batch /4 .. x4, relative steps and data.
        learning_rates: LR under each rule (None without a reference LR).
        warmup_steps: suggested linear warmup.
        warmup_note: how it was chosen.
        warnings: things to reconsider, one sentence each.
        notes: context, one sentence each.
    """

    global_batch_samples: int
    global_batch_tokens: int
    compute_flops: float | None
    deepseek_batch_tokens: float | None
    deepseek_lr: float | None
    critical_batch_tokens: float | None
    critical_batch_source: str
    steps_factor: float | None
    data_factor: float | None
    batch_table: tuple[BatchPoint, ...]
    learning_rates: LearningRates | None
    warmup_steps: int | None
    warmup_note: str
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the ``guidance`` member of ``plan --json``)."""
        out = asdict(self)
        out['batch_table'] = [asdict(p) for p in self.batch_table]
        out['warnings'], out['notes'] = list(self.warnings), list(self.notes)
        return out


def suggest_warmup_steps(tokens_per_step: float, total_steps: float | None = None,
                         base_warmup_steps: int | None = None,
                         base_batch_tokens: float | None = None) -> tuple[int, str]:
    """Linear warmup steps for the planned batch, and why.

    Warmup is a fixed amount of data (Goyal et al. warm up over 5 epochs whatever the
    batch), so a reference warmup keeps its tokens; without one, GPT-3's 375M tokens.
    Never more than 10 % of the run.
    """
    if base_warmup_steps is not None and base_batch_tokens is not None:
        tokens = base_warmup_steps * base_batch_tokens
        note: str = Message('guidance.warmup_reference', steps=base_warmup_steps,
                            tokens=f'{base_batch_tokens:,.0f}')
    else:
        tokens = DEFAULT_WARMUP_TOKENS
        note = 'GPT-3 warmed up over 375M tokens (Brown et al. 2020)'
    steps = math.ceil(tokens / tokens_per_step)
    if total_steps is not None and steps > MAX_WARMUP_FRACTION * total_steps:
        steps = max(1, math.floor(MAX_WARMUP_FRACTION * total_steps))
        note = Message('guidance.warmup_capped', note=note)
    return steps, note


def advise(model: ModelSpec, seq_len: int, global_batch_samples: int, *,
           total_tokens: float | None = None, optimizer: str = 'adamw',
           base_lr: float | None = None, base_batch_samples: float | None = None,
           b_noise_tokens: float | None = None, base_warmup_steps: int | None = None,
           micro_batch: int | None = None, grad_accum: int | None = None, pp: int = 1,
           efficiency_fraction: float | None = None, gemm_flops: float | None = None,
           step_time_s: float | None = None, lora: bool = False) -> Guidance:
    """Guidance for training ``model`` with a global batch of ``global_batch_samples``.

    Args:
        model: the transformer (for DeepSeek's compute).
        seq_len: tokens per sequence.
        global_batch_samples: the planned batch, in sequences.
        total_tokens: training tokens (for C and the warmup cap).
        optimizer: ``OPTIMIZERS`` key, choosing the LR rule.
        base_lr: reference learning rate.
        base_batch_samples: the batch ``base_lr`` was tuned at, in sequences.
        b_noise_tokens: measured gradient noise scale, in tokens.
        base_warmup_steps: the reference recipe's warmup steps (at the base batch).
        micro_batch: the chosen plan's micro-batch (for the GPU-use warning).
        grad_accum: the chosen plan's accumulation (for the deep-accumulation warning).
        pp: the chosen plan's pipeline size (accumulation it needs anyway).
        efficiency_fraction: eta / eta_max of the chosen plan's GEMMs.
        gemm_flops: FLOPs of the chosen plan's representative GEMM.
        step_time_s: the chosen plan's step time.
        lora: the plan fine-tunes LoRA adapters (adds a note on their learning rates).

    Raises:
        InputError: a reference LR without its batch, or a bad number.
    """
    GuidanceInputs(base_lr=base_lr, base_batch_samples=base_batch_samples,
                   b_noise_tokens=b_noise_tokens)  # the checks, once
    batch_tokens = global_batch_samples * seq_len
    warnings: list[str] = []
    notes: list[str] = []

    compute = opt_batch = opt_lr = None
    if total_tokens is not None:
        compute = deepseek_compute_flops(model, seq_len, total_tokens)
        opt_batch, opt_lr = deepseek_optimal_batch_tokens(compute), deepseek_optimal_lr(compute)
        notes.append(Message('guidance.deepseek', compute=f'{compute:.2e}',
                             batch=f'{opt_batch / 1e6:,.2f}', lr=f'{opt_lr:.2e}'))
    critical, source = _critical_batch(b_noise_tokens, opt_batch)
    s_factor = d_factor = None
    table: tuple[BatchPoint, ...] = ()
    if critical is not None:
        s_factor, d_factor, table = _against_critical(batch_tokens, critical, source,
                                                      warnings, notes)
    rates = None
    if base_lr is not None and base_batch_samples is not None:
        rates = scale_learning_rate(base_lr, base_batch_samples, global_batch_samples,
                                    optimizer, None if b_noise_tokens is None
                                    else b_noise_tokens / seq_len)
        if critical is not None and batch_tokens > critical and rates.ratio > 1:
            notes.append('the scaling rules hold below the critical batch; above it larger '
                         'LRs stop paying off (McCandlish et al. 2018)')
    warnings += _plan_warnings(micro_batch, grad_accum, pp, efficiency_fraction, gemm_flops,
                               step_time_s)
    if lora:
        notes.append(LORA_LR_NOTE)
    total_steps = None if total_tokens is None else total_tokens / batch_tokens
    warmup, warmup_note = suggest_warmup_steps(
        batch_tokens, total_steps, base_warmup_steps,
        None if base_batch_samples is None else base_batch_samples * seq_len)
    return Guidance(
        global_batch_samples=global_batch_samples, global_batch_tokens=batch_tokens,
        compute_flops=compute, deepseek_batch_tokens=opt_batch, deepseek_lr=opt_lr,
        critical_batch_tokens=critical, critical_batch_source=source, steps_factor=s_factor,
        data_factor=d_factor, batch_table=table, learning_rates=rates, warmup_steps=warmup,
        warmup_note=warmup_note, warnings=tuple(warnings), notes=tuple(notes))


def _critical_batch(b_noise_tokens: float | None,
                    deepseek_batch_tokens: float | None) -> tuple[float | None, str]:
    """The critical batch in tokens, and where it comes from."""
    if b_noise_tokens is not None:
        return b_noise_tokens, 'gradient noise scale given (--b-noise)'
    if deepseek_batch_tokens is not None:
        return deepseek_batch_tokens, 'DeepSeek B_opt (no --b-noise given)'
    return None, 'unknown (give --b-noise or a data size)'


def _against_critical(batch_tokens: float, critical: float, source: str,
                      warnings: list[str], notes: list[str]
                      ) -> tuple[float, float, tuple[BatchPoint, ...]]:
    """Steps and data factors of the batch, the table around it, and the warning or note
    when it is far from the critical batch (appended to ``warnings`` / ``notes``)."""
    s_factor, d_factor = steps_factor(batch_tokens, critical), data_factor(batch_tokens,
                                                                              critical)
    table = tuple(BatchPoint(batch_tokens=batch_tokens * k,
                             relative_steps=steps_factor(batch_tokens * k, critical) / s_factor,
                             relative_tokens=data_factor(batch_tokens * k, critical) / d_factor)
                  for k in (0.25, 0.5, 1.0, 2.0, 4.0))
    if batch_tokens > ABOVE_CRITICAL_FACTOR * critical:
        doubling = steps_factor(2 * batch_tokens, critical) / s_factor
        warnings.append(Message(
            'guidance.above_critical', batch=f'{batch_tokens / 1e6:,.2f}',
            ratio=f'{batch_tokens / critical:.1f}', critical=f'{critical / 1e6:,.2f}',
            source=source, data=f'{d_factor:.1f}', steps=f'{doubling:.0%}'))
    elif batch_tokens < critical / 4:
        notes.append(Message('guidance.below_critical', ratio=f'{critical / batch_tokens:.1f}'))
    return s_factor, d_factor, table


def _plan_warnings(micro_batch: int | None, grad_accum: int | None, pp: int,
                   efficiency_fraction: float | None, gemm_flops: float | None,
                   step_time_s: float | None) -> list[str]:
    """What the chosen layout wastes: small GEMMs, or slow steps from deep accumulation."""
    warnings: list[str] = []
    if efficiency_fraction is not None and efficiency_fraction < LOW_EFFICIENCY_FRACTION:
        fraction = f'{efficiency_fraction:.0%}'
        warnings.append(
            Message('guidance.low_efficiency_gemm', micro=micro_batch,
                    gflop=f'{gemm_flops / 1e9:,.1f}', fraction=fraction) if gemm_flops
            else Message('guidance.low_efficiency', micro=micro_batch, fraction=fraction))
    if grad_accum is not None and grad_accum > max(DEEP_ACCUMULATION, 4 * pp):
        warnings.append(
            Message('guidance.deep_accumulation_timed', accum=grad_accum,
                    seconds=f'{step_time_s:,.1f}') if step_time_s
            else Message('guidance.deep_accumulation', accum=grad_accum))
    return warnings
