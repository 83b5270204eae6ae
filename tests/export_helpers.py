"""Plans and a bash harness shared by the plan-file, export and launcher tests.

:func:`make_plan` runs a real search pinned to one layout (a small model, so it always
fits). :func:`run_script` runs an exported script under real ``bash`` with the launchers
replaced by stubs on ``PATH`` that record their argv (NUL-separated), so tests see the
exact arguments a launcher would get after the shell's own parsing, and can check that
nothing else ran.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
from pathlib import Path

from planner.errors import InputError
from planner.export.base import stage_layers
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.training import LoraSpec
from planner.models.presets import find_preset
from planner.planfile.document import GuidanceInputs, PlanFile, plan_file_from_search
from planner.plans.request import LayoutLimits, PlanRequest
from planner.plans.search import search
from planner.timing.step_time import TrainingLength

STUBS = ('torchrun', 'accelerate', 'srun', 'python', 'llamafactory-cli')
STUB = r'''#!/usr/bin/env bash
# Records how it was called; srun also runs its command, as srun would on one node.
name="$(basename "$0")"
printf '%s\0' "$@" > "$CALLS_DIR/$name.argv"
env > "$CALLS_DIR/$name.env"
if [ "$name" = accelerate ]; then
  prev=''
  for arg in "$@"; do
    if [ "$prev" = --config_file ]; then cp -- "$arg" "$CALLS_DIR/accelerate_config.yaml"; fi
    prev="$arg"
  done
fi
if [ "$name" = srun ]; then exec "$@"; fi
'''
SCONTROL = '#!/usr/bin/env bash\nprintf "gpu-node-007\\ngpu-node-008\\n"\n'


def make_plan(*, model: str = 'llama-3.2-1b', nodes: int = 2, gpus_per_node: int = 8,
              tp: int = 1, pp: int = 1, cp: int = 1, vpp: int = 1, micro_batch: int = 2,
              zero: int = 1, recompute: str = 'none', global_batch: int = 256,
              precision: str = '', framework: str = '', optimizer: str = 'adamw',
              base_lr: float | None = 3e-4, seq_len: int = 2048,
              tokens: float = 2e10, lora: LoraSpec | None = None, compile: bool = False,
              async_tp: bool = False, uneven_pipeline: bool = False,
              loss: str = '') -> PlanFile:
    """A plan from a real search, pinned to one layout (LoRA with ``lora``); with no
    ``framework``, the best stack that runs the layout, with its own recipe.

    A (framework, precision, ZeRO) combination no stack runs is what a schema-2 plan
    file (one global framework and recipe, migrated) can still hold: it is searched with
    every stack and its recipe, then recorded with the asked framework and precision, so
    the exporters' handling of such files stays tested.
    """
    try:
        return _make_plan(model=model, nodes=nodes, gpus_per_node=gpus_per_node, tp=tp, pp=pp,
                          cp=cp, vpp=vpp, micro_batch=micro_batch, zero=zero,
                          recompute=recompute, global_batch=global_batch, precision=precision,
                          framework=framework, optimizer=optimizer, base_lr=base_lr,
                          seq_len=seq_len, tokens=tokens, lora=lora, compile=compile,
                          async_tp=async_tp, uneven_pipeline=uneven_pipeline, loss=loss)
    except InputError:
        if not (framework or precision) or loss:  # a refused loss is never papered over
            raise
    plan = _make_plan(model=model, nodes=nodes, gpus_per_node=gpus_per_node, tp=tp, pp=pp,
                      cp=cp, vpp=vpp, micro_batch=micro_batch, zero=zero, recompute='',
                      global_batch=global_batch, precision='', framework='',
                      optimizer=optimizer, base_lr=base_lr, seq_len=seq_len, tokens=tokens,
                      lora=lora)
    legacy = {'framework': framework or 'hf', 'precision': precision or 'amp-bf16'}
    return dataclasses.replace(
        plan, constraints=dataclasses.replace(plan.constraints, **legacy),
        candidate=dataclasses.replace(plan.candidate, recompute=recompute, **legacy))


def _make_plan(*, model: str, nodes: int, gpus_per_node: int, tp: int, pp: int, cp: int,
               vpp: int, micro_batch: int, zero: int, recompute: str, global_batch: int,
               precision: str, framework: str, optimizer: str, base_lr: float | None,
               seq_len: int, tokens: float, lora: LoraSpec | None, compile: bool = False,
               async_tp: bool = False, uneven_pipeline: bool = False,
               loss: str = '') -> PlanFile:
    request = PlanRequest(
        model=find_preset(model), seq_len=seq_len, gpu=find_gpu('h100-sxm'), max_nodes=nodes,
        gpus_per_node=gpus_per_node,
        inter_node=find_interconnect('ib-ndr') if nodes > 1 else None,
        global_batch=global_batch, length=TrainingLength(tokens=tokens),
        zero_stages=(zero,),
        recompute_modes=(recompute,) if recompute else ('none', 'selective', 'full'),
        precision=precision,
        optimizer=optimizer, framework=framework, lora=lora, compile=compile,
        async_tp=async_tp, loss=loss,
        limits=LayoutLimits(gpus=(nodes * gpus_per_node,), tp=(tp,), pp=(pp,), cp=(cp,),
                            vpp=(vpp,), micro_batch=(micro_batch,),
                            min_tokens_per_cp_rank=1, uneven_pipeline=uneven_pipeline))
    result = search(request)
    assert result.status == 'ok', result.message
    inputs = GuidanceInputs(base_lr=base_lr, base_batch_samples=128.0 if base_lr else None)
    plan = plan_file_from_search(request, result, 0, model_arg=model, guidance_inputs=inputs)
    c = plan.candidate
    assert (c.nodes, c.gpus_per_node, c.tp, c.pp, c.cp, c.vpp, c.micro_batch, c.zero) == (
        nodes, gpus_per_node, tp, pp, cp, vpp, micro_batch, zero)
    return plan


def hsdp_plan(*, framework: str = 'hf', zero: int = 3, nodes: int = 4,
              model: str = 'llama-3.2-1b') -> PlanFile:
    """The first HSDP row (``dp_replicate`` > 1: one node's ranks per shard group) of a
    real search on ``nodes`` 8-GPU nodes, with its own estimates, as a plan."""
    request = PlanRequest(
        model=find_preset(model), seq_len=4096, gpu=find_gpu('h100-sxm'), max_nodes=nodes,
        gpus_per_node=8, inter_node=find_interconnect('ib-ndr'), global_batch=256,
        length=TrainingLength(tokens=2e10), zero_stages=(zero,), recompute_modes=('none',),
        framework=framework, top_k=10_000,
        limits=LayoutLimits(gpus=(nodes * 8,), tp=(1,), pp=(1,), cp=(1,), micro_batch=(1,)))
    result = search(request)
    rows = result.top(request.top_k, distinct=False)
    index = next(i for i, c in enumerate(rows) if c.dp_replicate > 1)
    inputs = GuidanceInputs(base_lr=3e-4, base_batch_samples=128.0)
    return plan_file_from_search(request, result, chosen=rows[index], model_arg=model,
                                 guidance_inputs=inputs)


def renamed(plan: PlanFile, name: str) -> PlanFile:
    """The plan with another model name (for hostile-name tests)."""
    spec = dataclasses.replace(plan.model.spec, name=name)
    return dataclasses.replace(plan, model=dataclasses.replace(plan.model, spec=spec, ref=name))


def edited(plan: PlanFile, **candidate: object) -> PlanFile:
    """The plan with some of its candidate's fields replaced, as a hand-edited (or older)
    file may have them: what the search would not produce, for the exporters' own checks."""
    return dataclasses.replace(plan, candidate=dataclasses.replace(plan.candidate, **candidate))


def run_script(text: str, folder: Path, env: dict[str, str] | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
    """Run an exported bash script with stubbed launchers in ``folder``."""
    bin_dir, calls = folder / 'bin', folder / 'calls'
    bin_dir.mkdir(exist_ok=True)
    calls.mkdir(exist_ok=True)
    for name in STUBS:
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    (bin_dir / 'scontrol').write_text(SCONTROL)
    (bin_dir / 'scontrol').chmod(0o755)
    script = folder / 'exported.sh'
    script.write_text(text)
    base = {k: v for k, v in os.environ.items() if not k.startswith(('PET_', 'SLURM_'))}
    for name in ('NODE_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE', 'RANK'):
        base.pop(name, None)
    full_env = {**base, **(env or {}), 'PATH': f'{bin_dir}:{os.environ["PATH"]}',
                'CALLS_DIR': str(calls)}
    done = subprocess.run(['bash', str(script)], cwd=folder, env=full_env, capture_output=True,
                          text=True, timeout=60, check=False)
    if check:
        assert done.returncode == 0, (done.returncode, done.stderr)
    return done


def recorded_argv(folder: Path, program: str) -> list[str]:
    """The argv a stubbed launcher received."""
    data = (folder / 'calls' / f'{program}.argv').read_bytes()
    return data.decode().split('\0')[:-1]


def recorded_env(folder: Path, program: str) -> dict[str, str]:
    """The environment a stubbed launcher saw (single-line values)."""
    lines = (folder / 'calls' / f'{program}.env').read_text().splitlines()
    return dict(line.split('=', 1) for line in lines if '=' in line)


def launch_comment(text: str) -> str:
    """The launch command a config file shows in its ``# Launch:`` comment, as shell text."""
    lines = text.splitlines()
    start = lines.index('# Launch:') + 1
    out = []
    for line in lines[start:]:
        body = line[2:]
        out.append(body)
        if not body.endswith('\\'):
            break
    return '\n'.join(out) + '\n'


def check_stage_layers(layers: list[list[int]], num_layers: int, pp: int, vpp: int) -> None:
    """Every layer built once, and no rank (nor the first rank's first virtual stage, in
    flight most often) over the memory model's share: ceil(layers / pp) a rank, 1/vpp of
    it a virtual stage (planner/memory/peak.py ``estimate_arrays``, ``_inflight``)."""
    charged = math.ceil(num_layers / pp)
    assert (len(layers), {len(r) for r in layers}) == (pp, {vpp})
    assert sum(map(sum, layers)) == num_layers
    assert max(map(sum, layers)) <= charged
    assert layers[0][0] * vpp <= charged
    assert min(map(min, layers)) >= 1
    assert layers == stage_layers(num_layers, pp, vpp)  # the split the exporter meant
