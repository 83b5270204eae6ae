"""Plain-text and JSON renderings of a memory estimate (shared by the CLI and docs)."""

from __future__ import annotations

from typing import Any

from planner.hardware.devices import GpuSpec
from planner.memory.peak import MemoryEstimate
from planner.memory.training import TrainingSetup
from planner.models.spec import ModelSpec
from planner.stacks import STACKS
from planner.units import gib

# Display order and words for the named parts.
COMPONENT_LABELS: dict[str, str] = {
    'weights': 'weights',
    'gradients': 'gradients',
    'optimizer_states': 'optimizer states (+ master)',
    'optimizer_step_temp': 'optimizer step temporaries',
    'activations': 'activations',
    'logits': 'logits and loss buffers',
    'model_outputs': 'model output held by the loop',
    'attention_scores_temp': 'eager attention scores (transient)',
    'forward_temp': 'forward temporaries',
    'autocast_copies': 'autocast weight copies',
    'backward_temp': 'backward temporaries',
    'zero3_gathered': 'ZeRO-3 gathered layers',
    'unsharded_grad': 'unsharded grads before reduce-scatter',
    'buffers': 'DDP/ZeRO buckets',
}
LOOP_WORDS: dict[str, str] = {
    'keep-outputs': 'outputs held through backward and step, as accelerate/plain loops do',
    'trainer': 'outputs freed in compute_loss, as the HF Trainer does',
}
OVERHEAD_LABELS: dict[str, str] = {
    'cuda_context': 'CUDA context',
    'workspace': 'cuBLAS/NCCL workspaces',
    'allocator_reserve': 'allocator reserve',
}



def _loop_words(s: TrainingSetup) -> str:
    """The training loop the estimate assumed: the user's choice where the stack runs the
    user's own loop, else the stack's trainer (which keeps only the loss)."""
    if STACKS[s.framework].user_loop:
        return f'loop {s.loop} ({LOOP_WORDS[s.loop]})'
    return "loop: the stack's own (it keeps only the loss, not the model output)"

def estimate_json(model: ModelSpec, setup: TrainingSetup, est: MemoryEstimate,
                  gpu: GpuSpec | None) -> dict[str, Any]:
    """The ``batchfit estimate --json`` document (schema in docs/cli-json.md)."""
    return {
        'schema': 'batchfit.estimate/1',
        'model': {
            'name': model.name,
            'parameters': model.total_params(),
            'active_parameters': model.active_params(),
            'source': model.source,
            'training_flops_per_token': model.training_flops_per_token(
                setup.seq_len, setup.recompute),
        },
        'config': {**setup.to_dict(), 'world_size': setup.world_size,
                   'global_batch': setup.global_batch,
                   'gpu': None if gpu is None else gpu.key},
        'memory': {
            'components': dict(est.components),
            'overhead': dict(est.overhead),
            'phases': dict(est.phases),
            'peak_phase': est.peak_phase,
            'activations_per_layer_bytes': est.activations_per_layer_bytes,
            'tensor_peak_bytes': est.tensor_peak_bytes,
            'total_bytes': est.total_bytes,
            'capacity_bytes': est.capacity_bytes,
            'margin_fraction': est.margin_fraction,
            'usable_bytes': est.usable_bytes,
            'headroom_bytes': est.headroom_bytes,
            'fits': est.fits,
            'notes': list(est.notes),
        },
    }


def estimate_text(model: ModelSpec, setup: TrainingSetup, est: MemoryEstimate,
                  gpu: GpuSpec | None) -> str:
    """A readable breakdown in GiB, the peak phase, and whether it fits."""
    s = setup
    lines = [
        f'{model.name}: {model.total_params() / 1e9:,.3f} B parameters'
        + (f' ({model.active_params() / 1e9:,.2f} B active)' if model.moe else ''),
        f'  sequence {s.seq_len} · micro-batch {s.micro_batch} · accumulation {s.grad_accum}'
        f' · global batch {s.global_batch} sequences ({s.global_batch * s.seq_len:,} tokens)',
        f'  {s.precision} · {s.optimizer} · ZeRO-{s.zero}'
        + (f' (offload {s.offload})' if s.offload != 'none' else '')
        + f' · recompute {s.recompute} · {s.attention} attention · stack {s.framework}'
        + ''.join(f' · {name.replace("_", " ")}' for name in
                  ('partition_activations', 'zero_bubble', 'grad_reduce_in_bf16')
                  if getattr(s, name)),
        f'  {_loop_words(s)} · loss {s.loss_kind}',
        f'  TP {s.tp} · PP {s.pp}' + (f' (x{s.vpp} virtual)' if s.vpp > 1 else '')
        + f' · CP {s.cp} · EP {s.ep} · DP {s.dp} = {s.world_size} GPU'
        + ('s' if s.world_size > 1 else '')
        + (' · sequence parallel' if s.tp > 1 and s.sequence_parallel else ''),
        '',
        f'Per-GPU memory at the peak ({est.peak_phase.replace("_", " ")}):',
    ]
    width = 32
    always = ('weights', 'gradients', 'optimizer_states', 'activations')
    for key, label in COMPONENT_LABELS.items():
        value = est.components.get(key, 0)
        if value or key in always:
            lines.append(f'  {label:<{width}}{gib(value):>14}')
    lines.append(f'  {"tensor peak":<{width}}{gib(est.tensor_peak_bytes):>14}'
                 '   ~ torch.cuda.max_memory_allocated')
    for key, label in OVERHEAD_LABELS.items():
        lines.append(f'  {label:<{width}}{gib(est.overhead[key]):>14}')
    lines.append(f'  {"total":<{width}}{gib(est.total_bytes):>14}   ~ nvidia-smi')
    lines.append('')
    lines.append('Phases: ' + ' · '.join(f'{k.replace("_", " ")} {gib(v)}'
                                         for k, v in est.phases.items()))
    if gpu is not None and est.usable_bytes is not None and est.headroom_bytes is not None:
        verdict = (f'fits, headroom {gib(est.headroom_bytes)}' if est.fits else
                   f'DOES NOT FIT, short by {gib(-est.headroom_bytes)}')
        lines.append(
            f'{gpu.name}: {gib(gpu.memory_bytes)}, usable {gib(est.usable_bytes)} with a '
            f'{est.margin_fraction:.0%} margin: {verdict}')
    lines.extend(f'note: {n}' for n in est.notes)
    return '\n'.join(lines)
