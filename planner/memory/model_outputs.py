"""What the training loop holds of the model's output: the logits, or nothing.

A Hugging Face causal LM returns ``CausalLMOutput(loss, logits)`` with the logits in the
head's dtype (``LlamaForCausalLM.forward``: ``logits = self.lm_head(hidden_states)``; the
loss upcasts its own copy, ``transformers/loss/loss_utils.py::ForCausalLMLoss``).

* ``trainer``: ``transformers.Trainer.compute_loss`` (and TRL's trainers) return the loss
  only, so the output and its logits are freed before ``backward()``
  (``transformers/trainer.py::Trainer.training_step``).
* ``keep-outputs``: accelerate's examples (``outputs = model(**batch); loss =
  outputs.loss; accelerator.backward(loss); optimizer.step()``,
  ``accelerate/examples/nlp_example.py``) and plain PyTorch loops keep ``outputs`` in a
  local variable through ``backward()`` and ``optimizer.step()``, and until the next
  micro-batch's forward has produced its own: one logits tensor (b·s·V in the head's
  dtype) is alive in every phase of the step.

A chunked / fused cross-entropy (Liger's ``LigerFusedLinearCrossEntropyLoss``) never
materializes the full logits in training and returns none, so nothing is held either way.
"""

from __future__ import annotations

import numpy as np

from planner.memory.recipes import PrecisionRecipe
from planner.memory.training import LOOPS, LoraSpec
from planner.models.spec import ModelSpec

__all__ = ['LOOPS', 'logits_dtype_bytes', 'model_output_bytes']


def logits_dtype_bytes(r: PrecisionRecipe, lora: LoraSpec | None) -> float:
    """Bytes per element of the head's output: the autocast dtype, else the weights'."""
    if r.autocast:
        return float(r.act_bytes)
    return float(lora.frozen_bytes(r.act_bytes) if lora is not None else r.residual_bytes)


def model_output_bytes(m: ModelSpec, r: PrecisionRecipe, loop: str, loss: str,
                       lora: LoraSpec | None, b, s, t, c) -> np.ndarray:
    """Bytes the loop holds of the last stage's model output, per micro-batch in flight.

    ``b, s, t, c``: micro-batch, sequence length, tensor- and context-parallel sizes (the
    head's output is split over both).
    """
    if loop == 'trainer' or loss == 'chunked':
        return np.zeros(np.shape(b * s))
    return np.asarray(logits_dtype_bytes(r, lora) * b * s / c * m.vocab_size / t, float)
