"""The defaults every front end shares (CLI flags, app fields, plan files, the Python API).

Each is the choice that needs more memory where real behaviour depends on it, so an
estimate taken with defaults errs high rather than low.
"""

from __future__ import annotations

# torch.autocast(bf16) over fp32 master weights: what a plain PyTorch/transformers
# script does (transformers TrainingArguments(bf16=True)).
DEFAULT_PRECISION = 'amp-bf16'
# The stack a single-configuration estimate assumes when none is named (planner.stacks):
# Hugging Face Trainer/accelerate, PyTorch eager kernels as transformers runs them. A plan
# search with no stack named searches every stack instead.
DEFAULT_FRAMEWORK = 'hf'
DEFAULT_OPTIMIZER = 'adamw'
DEFAULT_ATTENTION = 'flash'
# Fraction of GPU memory kept free for what no model predicts (fragmentation, other
# processes); 5 % is a default until a calibration profile measures the machine.
DEFAULT_MARGIN_FRACTION = 0.05

# What a plan search tries and how it reports, unless told otherwise: PlanAsk,
# PlanRequest, `batchfit plan`'s flags and the app's fields all start from these.
# Every ZeRO stage: 0 DDP (FSDP no-shard), 1 optimizer states, 2 gradients (FSDP
# grad-op), 3 weights (FSDP full-shard).
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
# Every mode, in the order of the recompute codes the estimator and step time index by.
# ``half``: every other layer fully recomputed, the rest keep everything (torchtitan's
# selective every-2-layers AC; Megatron's ``--recompute-method block`` over half of
# each stage's layers).
RECOMPUTE_MODES: tuple[str, ...] = ('none', 'selective', 'full', 'half')
SORT_KEYS: tuple[str, ...] = ('time', 'cost', 'gpus', 'headroom')
DEFAULT_SORT_KEY = 'time'  # time-to-train
DEFAULT_TOP_K = 10  # candidates a plan reports
