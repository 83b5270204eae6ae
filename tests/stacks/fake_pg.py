"""One rank's training memory under a real stack's wrapping, on a fake process group.

The stack's own code wraps the model: torchtitan 0.2.2's ``apply_fsdp`` / ``apply_tp``
(torchtitan/models/llama3/infra/parallelize.py) and its stage split
(torchtitan/distributed/pipeline_parallel.py, ``generate_llm_fqn_per_model_part``), or
torch DDP around transformers' ``LlamaForCausalLM`` under ``torch.autocast``. The process
group is torch's fake one (``init_process_group("fake", store=FakeStore(), ...)``,
torch/testing/_internal/distributed/fake_pg.py): collectives return at once, every
tensor a rank would hold is still created. Under ``FakeTensorMode`` nothing is
allocated; ``FSDPMemTracker`` / ``MemTracker`` (torch/distributed/_tools/) count live
storage bytes by category and keep the peak.

Two training steps run (the first creates the optimizer state) with AdamW
``foreach=True`` (the CUDA default). The peak is MemTracker's: tensor bytes only, no
allocator cache, context or workspaces, so it compares with batchfit's
``tensor_peak_bytes``.

Fake-mode artifact handled here: DTensor's sharding propagation computes output
metadata by running the op on *global-shape* fake tensors in ``detect_fake_mode() or
FakeTensorMode()`` (torch/distributed/tensor/_sharding_prop.py,
``_propagate_tensor_meta_non_cached``). Under an outer FakeTensorMode that is the outer
mode, which MemTracker uses to tell local ops from propagation ops (its
``__torch_dispatch__`` compares the active fake mode with the one at entry), so the
global-shape temporaries are counted: for a ``foreach`` AdamW step over DTensors, every
list argument of the whole model at global size, about 3.5 x the global parameter bytes
in fp32 (about 14 x the optimizer states at 8 ranks). :func:`private_propagation_mode`
makes the propagation use its own FakeTensorMode, so MemTracker skips it again, as it does
in a real run. DTensor caches its propagation per op schema (in C++ too), so the artifact
shows only the first time an op is seen in a process: ``python -m tests.stacks.fake_pg
--artifact NAME`` measures it in a fresh process. :func:`measure` with ``fake=False`` (a
real allocating run on the same fake process group) gives the same peak to the byte on
the configurations checked (tests/stacks/test_stack_memory.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks.stack_flags import SMALL_LLAMA, StackConfig

KERNELS = 'torchtitan.models.moe.kernels'


def frameworks_missing(config: StackConfig) -> str:
    """Why ``config`` cannot be measured here (a missing package), or ''."""
    need = (['torch', 'torchtitan'] if config.wrapping.startswith('fsdp2')
            else ['torch', 'transformers', 'accelerate'] if config.wrapping == 'hf-fsdp2'
            else ['torch', 'transformers'])
    missing = [name for name in need if importlib.util.find_spec(name) is None]
    return f'not installed: {", ".join(missing)}' if missing else ''


def _stub_triton_kernels() -> None:
    """``import torchtitan`` reaches a triton MoE kernel (no CPU wheel) that Llama never runs."""
    if importlib.util.find_spec('triton') is not None or KERNELS in sys.modules:
        return
    stub = types.ModuleType(KERNELS)

    def generate_permute_indices(*args, **kwargs):
        raise RuntimeError('triton is not installed: MoE kernels are not available')

    stub.generate_permute_indices = generate_permute_indices
    sys.modules[KERNELS] = stub


@dataclass(frozen=True)
class StackMeasurement:
    """One rank's memory, in bytes of live tensor storage.

    Attributes:
        peak_bytes: the tracker's peak total over both steps.
        peak_by_category: the tracker's categories at that moment (they sum to the peak).
        optimizer_state_bytes: AdamW's states on this rank after a step (local shards).
        param_bytes: the parameters this rank holds between steps (local shards).
        params_global: parameters of the whole model (before any split).
        seconds: wall time of the measurement.
        propagation_artifact: True when DTensor propagation was left in the tracked
            fake mode (the artifact described in the module docstring).
    """

    peak_bytes: int
    peak_by_category: dict[str, int]
    optimizer_state_bytes: int
    param_bytes: int
    params_global: int
    seconds: float
    propagation_artifact: bool = False
    settings: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def private_propagation_mode() -> Iterator[None]:
    """DTensor's sharding propagation runs in its own FakeTensorMode (see the module docstring)."""
    import torch.distributed.tensor._sharding_prop as sharding_prop

    saved = sharding_prop.detect_fake_mode
    sharding_prop.detect_fake_mode = lambda *args, **kwargs: None
    try:
        yield
    finally:
        sharding_prop.detect_fake_mode = saved


@contextlib.contextmanager
def real_mesh_bookkeeping() -> Iterator[None]:
    """DeviceMesh builds its small rank tables with real tensors, even under FakeTensorMode.

    FSDP2 over a TP mesh concatenates the (dp, tp) mesh inside ``fully_shard``
    (torch/distributed/fsdp/_fully_shard/_fsdp_param.py ``_init_sharding_spec_tp``), which
    under FakeTensorMode would mix the meshes' real rank tensors with fake ones.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    saved = DeviceMesh.__init__

    def init(self, *args, **kwargs):
        with unset_fake_temporarily():
            saved(self, *args, **kwargs)

    DeviceMesh.__init__ = init
    try:
        yield
    finally:
        DeviceMesh.__init__ = saved


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0) -> Iterator[None]:
    """torch's fake process group for the duration (destroyed after, so sizes can change)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group('fake', store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, 'to_local') else t
        total += local.numel() * local.element_size()
    return total


def _state_bytes(optimizer) -> int:
    import torch

    return _local_bytes(v for state in optimizer.state.values() for v in state.values()
                        if isinstance(v, torch.Tensor) and v.dim() > 0)


def titan_args(model: dict[str, Any] = SMALL_LLAMA):
    """torchtitan's TransformerModelArgs for the HF-style shape ``model``."""
    _stub_triton_kernels()
    from torchtitan.models.llama3.model.args import TransformerModelArgs

    return TransformerModelArgs(
        dim=model['hidden_size'], n_layers=model['num_hidden_layers'],
        n_heads=model['num_attention_heads'], n_kv_heads=model['num_key_value_heads'],
        vocab_size=model['vocab_size'], max_seq_len=model['max_position_embeddings'],
        norm_eps=model['rms_norm_eps'])


def measure(config: StackConfig, *, fake: bool | None = None,
            fix_propagation: bool = True) -> StackMeasurement:
    """Measure rank 0 of ``config``, in FakeTensorMode unless ``fake`` is False."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake = config.fake if fake is None else fake
    start = time.perf_counter()
    torch.manual_seed(0)
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    fix = private_propagation_mode() if fix_propagation else contextlib.nullcontext()
    run = {'fsdp2': _run_fsdp2, 'fsdp2-pp': _run_fsdp2_pp, 'ddp': _run_ddp,
           'hf-fsdp2': _run_hf_fsdp2}[config.wrapping]
    with fake_process_group(config.world_size), fix, real_mesh_bookkeeping():
        peak, by_cat, opt_bytes, param_bytes, n_global = run(config, mode)
    return StackMeasurement(peak, by_cat, opt_bytes, param_bytes, n_global,
                            time.perf_counter() - start,
                            propagation_artifact=fake and not fix_propagation,
                            settings={'fake': fake, 'world_size': config.world_size})


def _snapshot(tracker) -> tuple[int, dict[str, int]]:
    snap = next(iter(tracker.get_tracker_snapshot('peak').values()))
    by_cat = {getattr(k, 'value', str(k)): int(v) for k, v in snap.items()}
    return int(by_cat.pop('Total')), by_cat


def _two_steps(tracker, optimizer, model, n_global: int, forward_backward,
               context: contextlib.AbstractContextManager | None = None):
    """Two steps of ``forward_backward`` and the optimizer under ``tracker`` (and
    ``context``), the first a warm-up whose module stats are dropped, so the peak is a
    step's with the optimizer states already there; rank 0's figures as ``measure``
    returns them."""
    with tracker, context or contextlib.nullcontext():
        for step in range(2):
            forward_backward()
            optimizer.step()
            optimizer.zero_grad()
            if step == 0:
                tracker.reset_mod_stats()
    peak, by_cat = _snapshot(tracker)
    return (peak, by_cat, _state_bytes(optimizer), _local_bytes(model.parameters()),
            n_global)


def _titan_loss(pred, labels):
    from torchtitan.components.loss import cross_entropy_loss

    return cross_entropy_loss(pred, labels)


def _run_fsdp2(config: StackConfig, mode):
    """torchtitan's parallelize_llama order: TP, then AC, then FSDP2 (no compile)."""
    import torch
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    _stub_triton_kernels()
    from torchtitan.config.job_config import ActivationCheckpoint as ACConfig
    from torchtitan.distributed.activation_checkpoint import apply_ac
    from torchtitan.models.llama3.infra.parallelize import apply_fsdp, apply_tp
    from torchtitan.models.llama3.model.model import Transformer

    args = titan_args()
    if config.tp > 1:
        mesh = init_device_mesh('cpu', (config.dp, config.tp), mesh_dim_names=('fsdp', 'tp'))
        dp_mesh, tp_mesh = mesh['fsdp'], mesh['tp']
    elif config.replicate > 1:  # HSDP: torchtitan's ("dp_replicate", "fsdp") mesh
        dp_mesh = init_device_mesh('cpu', (config.replicate, config.dp // config.replicate),
                                   mesh_dim_names=('dp_replicate', 'fsdp'))
        tp_mesh = None
    else:
        dp_mesh = init_device_mesh('cpu', (config.dp,), mesh_dim_names=('fsdp',))
        tp_mesh = None
    with mode:
        model = Transformer(args)
        n_global = sum(p.numel() for p in model.parameters())
        if tp_mesh is not None:
            # torchtitan's default: loss_parallel on (parallelism.disable_loss_parallel=False)
            apply_tp(model, tp_mesh, loss_parallel=True, enable_float8_tensorwise_tp=False)
        if config.ac == 'half':
            apply_ac(model, ACConfig(mode='selective', selective_ac_option='2'))
        elif config.ac != 'none':
            apply_ac(model, ACConfig(mode=config.ac))
        apply_fsdp(model, dp_mesh, param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                   pp_enabled=False)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        vocab = args.vocab_size
        tokens = torch.randint(0, vocab, (config.micro_batch, config.seq_len))
        labels = torch.randint(0, vocab, (config.micro_batch, config.seq_len))
        loss_ctx = loss_parallel if tp_mesh is not None else contextlib.nullcontext
        tracker = FSDPMemTracker(model, optimizer)
        tracker.track_inputs((tokens, labels))

        def forward_backward() -> None:
            with loss_ctx():
                _titan_loss(model(tokens), labels).backward()

        return _two_steps(tracker, optimizer, model, n_global, forward_backward)


def _run_fsdp2_pp(config: StackConfig, mode):
    """Rank 0 = the first stage of torchtitan's split, FSDP2 without reshard after forward.

    The schedule is 1F1B run by hand on the first stage (``pp`` forwards in flight,
    then one forward one backward), with the FSDP2 settings torch's PipelineStage uses
    for every micro-batch's backward (``backward_maybe_with_nosync``: no gradient sync,
    no reshard after backward) and its ``perform_reduce_grad`` after the last one
    (torch/distributed/pipelining/stage.py). The stage output's gradient, which stage 1
    would send, is a tensor of the output's shape.
    """
    import torch
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _stub_triton_kernels()
    from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part
    from torchtitan.models.llama3.infra.parallelize import apply_fsdp
    from torchtitan.models.llama3.model.model import Transformer

    args = titan_args()
    mesh = init_device_mesh('cpu', (config.pp, config.dp), mesh_dim_names=('pp', 'fsdp'))
    stage_names = generate_llm_fqn_per_model_part(config.pp, args.n_layers)[0]
    with mode:
        model = Transformer(args)
        n_global = sum(p.numel() for p in model.parameters())
        _keep_stage(model, stage_names)  # as torchtitan's pipeline_module_split does
        apply_fsdp(model, mesh['fsdp'], param_dtype=torch.bfloat16,
                   reduce_dtype=torch.float32, pp_enabled=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        m, b, s = config.microbatches, config.micro_batch, config.seq_len
        tokens = [torch.randint(0, args.vocab_size, (b, s)) for _ in range(m)]
        tracker = FSDPMemTracker(model, optimizer)
        tracker.track_inputs(tuple(tokens))
        order = _one_f_one_b(m, warmup=min(config.pp, m))

        def forward_backward() -> None:
            outputs = {}
            for kind, i in order:
                if kind == 'F':
                    outputs[i] = model(tokens[i])
                else:
                    model.set_is_last_backward(False)
                    model.set_reshard_after_backward(False)
                    model.set_requires_gradient_sync(False)
                    out = outputs.pop(i)
                    out.backward(torch.ones_like(out))
            model.set_is_last_backward(True)
            model.set_reshard_after_backward(True)
            model.set_requires_gradient_sync(True)
            state = fully_shard.state(model)
            for sub in state._state_ctx.all_states:
                for group in sub._fsdp_param_groups:
                    group.post_backward()
            state._root_post_backward_final_callback()

        return _two_steps(tracker, optimizer, model, n_global, forward_backward)


def _keep_stage(model, names: list[str]) -> None:
    """Delete what the stage does not own, as torchtitan's ``_build_stage_from_modules``."""
    keep = set(names)
    layers = {n.split('.', 1)[1] for n in keep if n.startswith('layers.')}
    for name in list(model.layers.keys()):
        if name not in layers:
            del model.layers[name]
    for name in ('tok_embeddings', 'norm', 'output'):
        if name not in keep:
            setattr(model, name, None)


def _one_f_one_b(microbatches: int, warmup: int) -> list[tuple[str, int]]:
    """1F1B on one stage: ``warmup`` forwards, then alternate, then drain the backwards."""
    order = [('F', i) for i in range(warmup)]
    f, b = warmup, 0
    while b < microbatches:
        order.append(('B', b))
        b += 1
        if f < microbatches:
            order.append(('F', f))
            f += 1
    return order


def _in_place_all_reduce(state, bucket):
    """DDP's all-reduce as NCCL does it, in place on the bucket; the fake group's future
    carries no tensor, which DDP's default hook cannot take."""
    import torch

    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def _run_ddp(config: StackConfig, mode):
    """transformers' LlamaForCausalLM in torch DDP, the forward under torch.autocast(bf16).

    The HF Trainer's ``--bf16`` path: fp32 weights, autocast around the forward and the
    loss (transformers' own ``ForCausalLMLoss``), DDP's gradient buckets. CPU autocast is
    given CUDA's fp32 op list (tests/groundtruth/measure.py ``CudaAutocastPolicy``) so
    the dtypes, and the bytes, are a CUDA run's.
    """
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.nn.parallel import DistributedDataParallel
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.groundtruth.measure import CudaAutocastPolicy

    cfg = LlamaConfig(**{k: v for k, v in SMALL_LLAMA.items() if k != 'model_type'},
                      attn_implementation='sdpa')
    with mode:
        model = LlamaForCausalLM(cfg)
        n_global = sum(p.numel() for p in model.parameters())
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(None, _in_place_all_reduce)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        b, s = config.micro_batch, config.seq_len
        tokens = torch.randint(0, cfg.vocab_size, (b, s))
        tracker = MemTracker()
        tracker.track_external(ddp, optimizer, tokens)

        def forward_backward() -> None:
            with torch.autocast('cpu', dtype=torch.bfloat16):
                loss = ddp(input_ids=tokens, labels=tokens).loss
            loss.backward()

        return _two_steps(tracker, optimizer, model, n_global, forward_backward,
                          CudaAutocastPolicy())


def _run_hf_fsdp2(config: StackConfig, mode):
    """transformers' LlamaForCausalLM prepared by accelerate 1.15's own FSDP2 code.

    ``fsdp2_prepare_model`` (huggingface/accelerate src/accelerate/utils/fsdp_utils.py)
    runs as ``Accelerator.prepare`` calls it for ``mixed_precision="bf16"`` and
    ``fsdp_version=2``: every decoder layer, the input embedding, the final norm with the
    head (kept gathered after forward) and the root each ``fully_shard``-ed with the
    plugin's ``MixedPrecisionPolicy`` (bf16 parameters, reduce and output:
    ``FullyShardedDataParallelPlugin.set_mixed_precision``, which AcceleratorState calls)
    over ``ParallelismConfig``'s mesh: with ``replicate`` > 1 its ("dp_replicate",
    "dp_shard_cp") part, HSDP. Only the accelerator object is a stand-in (the real one
    wants CUDA for FSDP, src/accelerate/state.py): it carries the real plugin, config and
    mesh. The forward runs as ``prepare_model`` wraps it for ``native_amp``: under
    autocast(bf16), outputs converted to fp32 (src/accelerate/accelerator.py;
    ``convert_outputs_to_fp32``), with CUDA's autocast op list on the CPU as in
    :func:`_run_ddp`.
    """
    from types import SimpleNamespace

    import torch
    from accelerate import ParallelismConfig
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    from accelerate.utils.operations import convert_outputs_to_fp32
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.groundtruth.measure import CudaAutocastPolicy

    parallel = ParallelismConfig(dp_replicate_size=config.replicate,
                                 dp_shard_size=config.dp // config.replicate)
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=True,
                                            auto_wrap_policy='transformer_based_wrap',
                                            cpu_ram_efficient_loading=False)
    plugin.set_mixed_precision('bf16')
    accelerator = SimpleNamespace(
        state=SimpleNamespace(fsdp_plugin=plugin), parallelism_config=parallel,
        torch_device_mesh=parallel.build_device_mesh('cpu'), mixed_precision='bf16',
        is_main_process=True, device=torch.device('cpu'))
    cfg = LlamaConfig(**{k: v for k, v in SMALL_LLAMA.items() if k != 'model_type'},
                      attn_implementation='sdpa')
    with mode:
        model = LlamaForCausalLM(cfg)
        n_global = sum(p.numel() for p in model.parameters())
        model = fsdp2_prepare_model(accelerator, model)
        # on the instance, as prepare_model does: __call__ still runs FSDP's hooks
        model.forward = convert_outputs_to_fp32(
            torch.autocast('cpu', dtype=torch.bfloat16)(model.forward))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        b, s = config.micro_batch, config.seq_len
        tokens = torch.randint(0, cfg.vocab_size, (b, s))
        tracker = FSDPMemTracker(model, optimizer)
        tracker.track_inputs((tokens,))

        def forward_backward() -> None:
            model(input_ids=tokens, labels=tokens).loss.backward()

        return _two_steps(tracker, optimizer, model, n_global, forward_backward,
                          CudaAutocastPolicy())


def _main(argv: list[str] | None = None) -> int:
    """``--artifact NAME``: one configuration without the fix, in this fresh process (JSON)."""
    import argparse
    import json

    from benchmarks.stack_flags import CONFIGS

    parser = argparse.ArgumentParser(description=_main.__doc__)
    parser.add_argument('--artifact', required=True, choices=[c.name for c in CONFIGS])
    args = parser.parse_args(argv)
    config = next(c for c in CONFIGS if c.name == args.artifact)
    got = measure(config, fix_propagation=False)
    print(json.dumps({'peak_bytes': got.peak_bytes, 'by_category': got.peak_by_category,
                      'optimizer_state_bytes': got.optimizer_state_bytes}))
    return 0


if __name__ == '__main__':
    raise SystemExit(_main())


def hf_forward_backward_peak(*, fake: bool, attention_mask: bool, seq_len: int = 256,
                             micro_batch: int = 2) -> int:
    """MemTracker's peak of one fp32 forward + backward of transformers' small Llama.

    No process group, no optimizer: this isolates what FakeTensorMode changes in
    transformers' own code. With an all-ones ``attention_mask`` (what a padding collator
    passes) transformers checks the mask's values to drop it in favour of SDPA's causal
    path; under FakeTensorMode the values are unknown, so the mask is kept and the run
    departs from a real one (benchmarks/stack_memory.py ``--hf-mask-check`` prints both).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{k: v for k, v in SMALL_LLAMA.items() if k != 'model_type'},
                      attn_implementation='sdpa')
    torch.manual_seed(0)
    with FakeTensorMode() if fake else contextlib.nullcontext():
        model = LlamaForCausalLM(cfg)
        tokens = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len))
        extra = {'attention_mask': torch.ones_like(tokens)} if attention_mask else {}
        tracker = MemTracker()
        tracker.track_external(model, tokens)
        with tracker:
            model(input_ids=tokens, labels=tokens, **extra).loss.backward()
        return _snapshot(tracker)[0]
