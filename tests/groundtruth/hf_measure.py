"""Measure a training step of transformers' own model classes, for real, on the CPU.

The model is ``AutoModelForCausalLM.from_config`` of a config.json dict (transformers
5.23's own code: its masks, its attention functions, its loss), built small enough to
allocate. Two optimizer steps run under ``torch.distributed._tools.mem_tracker.MemTracker``
with real tensors; the peak is MemTracker's (live tensor storage, the analogue of
``torch.cuda.max_memory_allocated``: no allocator rounding or cache, no kernel-internal
scratch). Real runs, not ``FakeTensorMode``: under fake tensors transformers takes other
paths than on a GPU (a materialized ``(b, 1, s, s)`` mask, GQA expanded before SDPA).

What makes the run a CUDA run's in bytes:

* ``foreach=True`` AdamW (torch's default on CUDA; on the CPU the default is the
  for-loop implementation, ``torch/optim/optimizer.py::_default_to_fused_or_foreach``).
* Mixed precision runs CPU autocast with CUDA's fp32 op list on top
  (:class:`tests.groundtruth.measure.CudaAutocastPolicy`, after ``AT_FORALL_FP32`` in
  ``aten/src/ATen/autocast_mode.h``), also inside checkpoint recomputation.
* SDPA with attention dropout: the CPU dispatcher cannot use its flash kernel with
  dropout and falls back to the math path, which saves the (b, h, s, s) probabilities
  and the dropout mask (``aten/src/ATen/native/transformers/sdp_utils_cpp.cpp``,
  ``check_for_dropout``... the CPU flash kernel asserts ``dropout_p == 0``); CUDA's flash
  and memory-efficient kernels apply dropout in-kernel and save only the Philox seed and
  offset (``aten/src/ATen/native/transformers/cuda/attention.cu``). The harness therefore
  measures SDPA cases with ``attention_dropout`` 0 (the CUDA figure); eager cases keep it.
* Dropout: ``at::dropout`` takes the fused ``native_dropout`` kernel, which saves a 1-byte
  bool mask, only on CUDA-like devices (``aten/src/ATen/native/Dropout.cpp``,
  ``is_fused_kernel_acceptable``: ``input.is_cuda() || input.is_xpu() || ...``); on the CPU
  it multiplies by a noise tensor in the input's dtype and saves that (4 bytes an element
  in fp32). :class:`CudaDropout` sends ``F.dropout`` to ``torch.native_dropout`` (which has
  a CPU kernel) as CUDA's dispatch would. This is what made GPT-2 with its default 0.1
  dropouts look 2-4% heavier on the CPU than batchfit's count of bool masks.

The loop (``loop``) is the user's: ``'trainer'`` drops the model output inside the loss
computation (``transformers.Trainer.compute_loss`` returns the loss only), ``'keep-outputs'``
holds ``out`` (and its ``out.logits``, b·s·V) through ``backward()`` and ``optimizer.step()``
as accelerate's examples and plain PyTorch loops do (``out = model(**batch); loss =
out.loss; accelerator.backward(loss); optimizer.step()``).
"""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from planner.memory.training import LoraSpec
from tests.groundtruth.measure import (
    CATEGORIES,
    CudaAutocastPolicy,
    LiveBytes,
    _categories,
    _MemTracker,
    _ModuleEvents,
    _tensor_bytes,
    _total,
    make_optimizer,
)

torch.set_num_threads(1)  # the CI runners and this machine are small; no oversubscription
class CudaDropout(TorchFunctionMode):
    """``F.dropout`` in training as CUDA runs it: ``native_dropout``, a bool mask saved."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.dropout:
            x = args[0]
            p = kwargs.get('p', args[1] if len(args) > 1 else 0.5)
            training = kwargs.get('training', args[2] if len(args) > 2 else True)
            inplace = kwargs.get('inplace', args[3] if len(args) > 3 else False)
            if training and 0 < p < 1 and x.numel() and not inplace:
                return torch.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)


ITERATIONS = 2  # the first creates the optimizer state; the second is the steady state
LOOPS = ('trainer', 'keep-outputs')
# PEFT target-module names of the projections batchfit's LoRA spec names.
PEFT_TARGETS = {
    'q': ('q_proj',), 'k': ('k_proj',), 'v': ('v_proj',), 'o': ('o_proj', 'dense'),
    'gate': ('gate_proj',), 'up': ('up_proj',), 'down': ('down_proj',),
}
_DROPOUT_KEYS = ('attention_dropout', 'attn_pdrop', 'resid_pdrop', 'embd_pdrop',
                 'hidden_dropout', 'summary_first_dropout')


@dataclass(frozen=True)
class HfMeasurement:
    """One real training step's memory, in bytes of live tensor storage."""

    peak_bytes: int
    peak_by_category: dict[str, int]
    peak_phase: str
    peak_module: str
    param_bytes: int
    logits_bytes: int
    seconds: float
    settings: dict[str, Any] = field(default_factory=dict)


def measured_config(config: dict[str, Any], attention: str) -> dict[str, Any]:
    """The config the run uses: SDPA without attention dropout (CUDA's kernels apply it
    in-kernel; see the module docstring)."""
    cfg = dict(config)
    if attention == 'sdpa':
        for key in ('attention_dropout', 'attn_pdrop'):
            if key in cfg:
                cfg[key] = 0.0
    return cfg


def build_model(config: dict[str, Any], *, precision: str, attention: str,
                checkpointing: bool, lora: LoraSpec | None = None) -> torch.nn.Module:
    """transformers' own causal LM for ``config``, in training mode."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(measured_config(config, attention))
    model_type = cfg.pop('model_type')
    hf_config = AutoConfig.for_model(model_type, **cfg)
    dtype = torch.float32
    if precision == 'bf16' or (lora is not None and lora.base_bits == 16):
        dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(hf_config, attn_implementation=attention,
                                             dtype=dtype)
    model.config.use_cache = False  # training: no KV cache (the Trainer sets it too)
    model.train()
    if checkpointing:
        kwargs: dict[str, Any] = {'use_reentrant': False}
        # the recomputation runs under the same CUDA emulation as the forward
        kwargs['context_fn'] = lambda: (contextlib.nullcontext(), _recompute_context(precision))
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        present = {name.rsplit('.', 1)[-1] for name, _ in model.named_modules()}
        targets = sorted({t for key in lora.targets for t in PEFT_TARGETS[key]
                          if t in present})
        model = get_peft_model(model, LoraConfig(r=lora.rank, lora_alpha=2 * lora.rank,
                                                 target_modules=targets, lora_dropout=0.0))
        for p in model.parameters():  # adapters in fp32 (PEFT's autocast_adapter_dtype)
            if p.requires_grad:
                p.data = p.data.float()
        if checkpointing:
            model.enable_input_require_grads()  # what PEFT/TRL do for checkpointing
    return model


@contextlib.contextmanager
def _recompute_context(precision: str):
    with CudaDropout(), (CudaAutocastPolicy() if precision == 'amp-bf16'
                         else contextlib.nullcontext()):
        yield


def _forward_context(precision: str) -> contextlib.AbstractContextManager:
    if precision == 'amp-bf16':
        return torch.autocast('cpu', dtype=torch.bfloat16)
    return contextlib.nullcontext()


def measure_hf(config: dict[str, Any], *, seq_len: int, micro_batch: int,
               precision: str = 'fp32', attention: str = 'sdpa',
               checkpointing: bool = False, loop: str = 'keep-outputs',
               lora: LoraSpec | None = None, grad_accum: int = 1,
               seed: int = 0) -> HfMeasurement:
    """Peak live tensor bytes of two real training steps of ``config``'s model.

    Args:
        config: a config.json dict with its ``model_type``.
        precision: ``'fp32'``, ``'bf16'`` (model and optimizer in bf16) or ``'amp-bf16'``
            (fp32 model, forward and loss under autocast with CUDA's fp32 op list).
        attention: ``'eager'`` or ``'sdpa'`` (``attn_implementation``).
        checkpointing: ``gradient_checkpointing_enable`` (non-reentrant).
        loop: ``'trainer'`` or ``'keep-outputs'`` (see the module docstring).
        lora: PEFT LoRA (fp32 adapters) on a frozen base in ``lora.base_bits``' dtype.
    """
    if loop not in LOOPS:
        raise ValueError(f'unknown loop {loop!r}; allowed: {", ".join(LOOPS)}')
    started = time.perf_counter()
    torch.manual_seed(seed)
    gc.collect()
    model = build_model(config, precision=precision, attention=attention,
                        checkpointing=checkpointing, lora=lora)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer('adamw', trainable, foreach=True)
    vocab = model.config.vocab_size
    batches = []
    for _ in range(grad_accum):
        ids = torch.randint(0, vocab, (micro_batch, seq_len))
        batches.append((ids, ids.clone()))
    param_bytes = _tensor_bytes(list(model.parameters()))

    tracker = _MemTracker()
    tracker.track_external(model, opt, batches)
    counter = LiveBytes()
    counter.register(model, batches)
    modules = _ModuleEvents()
    counter.where = modules.last
    logits_bytes = 0
    policy = CudaAutocastPolicy() if precision == 'amp-bf16' else contextlib.nullcontext()
    out = None
    with modules, tracker, counter, policy, CudaDropout():
        for iteration in range(ITERATIONS):
            for ids, labels in batches:
                tracker.reset_mod_stats()
                counter.set_label(iteration, 'forward')
                # keep-outputs: as in `outputs = model(**batch)`, the previous output
                # lives until this forward returns
                with _forward_context(precision):
                    out = model(input_ids=ids, labels=labels)
                loss = out.loss
                logits_bytes = out.logits.untyped_storage().nbytes()
                if loop == 'trainer':
                    out = None
                counter.set_label(iteration, 'backward')
                loss.backward()
                del loss
            counter.set_label(iteration, 'optimizer')
            opt.step()
            counter.set_label(iteration, 'zero_grad')
            opt.zero_grad(set_to_none=True)
        del out
    peak = tracker.get_tracker_snapshot('peak')
    seconds = time.perf_counter() - started
    settings = {'seq_len': seq_len, 'micro_batch': micro_batch, 'precision': precision,
                'attention': attention, 'checkpointing': checkpointing, 'loop': loop,
                'lora': lora, 'grad_accum': grad_accum}
    result = HfMeasurement(peak_bytes=_total(peak), peak_by_category=_categories(peak),
                           peak_phase=counter.peak_label[1], peak_module=counter.peak_where,
                           param_bytes=param_bytes, logits_bytes=logits_bytes,
                           seconds=seconds, settings=settings)
    del model, opt, batches, tracker
    gc.collect()
    return result


def _main() -> None:
    import argparse

    from tests.groundtruth.hf_cases import HF_CASES

    parser = argparse.ArgumentParser(description='Measure the HF ground-truth cases.')
    parser.add_argument('--only', default='', help='substring of case ids to run')
    args = parser.parse_args()
    for case in HF_CASES:
        if args.only in case.id:
            m = case.measure()
            cats = ' '.join(f'{c}={m.peak_by_category[c] / 1e6:.2f}' for c in CATEGORIES
                            if m.peak_by_category[c])
            print(f'{case.id:70} {m.peak_bytes:>12,} {m.peak_phase:9} {m.seconds:5.1f}s '
                  f'{cats}  [{m.peak_module}]', flush=True)


if __name__ == '__main__':
    _main()
