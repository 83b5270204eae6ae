"""One MoE decoder layer of transformers' own models: what autograd saves against
``hf_layer_terms``.

``AutoModelForCausalLM.from_config`` of the MoE configs of ``hf_cases.CONFIGS`` (Mixtral,
Qwen2-MoE with its shared expert, Qwen3-MoE with and without ``norm_topk_prob``,
GPT-OSS) runs one forward on the CPU inside ``torch.autograd.graph.saved_tensors_hooks``
(under CPU autocast with CUDA's fp32 op list for ``amp-bf16``,
:class:`tests.groundtruth.measure.CudaAutocastPolicy`); the bytes of the distinct storages
first saved inside the second decoder layer are compared with batchfit's per-layer count.
The second layer, because the first also saves what batchfit counts once per stage (the
rotary tables, the masks). Left out of the measurement: parameters, and autocast's weight
casts (a cast whose source is a parameter), which batchfit counts as casts, not
activations; per-layer tensors that do not grow with the tokens (grouped_mm's int32
offsets, 4 B per expert) are taken off. The whole-step peaks of the same models are in
test_hf_models.py; this holds the MoE layer itself to 1 % and never low.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from planner.memory.activations import hf_layer_terms
from planner.memory.recipes import RECIPES
from planner.models.hf_config import spec_from_hf_config
from tests.groundtruth.hf_cases import CONFIGS

pytest.importorskip('torch')
pytest.importorskip('transformers')

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings('ignore::FutureWarning'),
              pytest.mark.filterwarnings('ignore::UserWarning')]

B, S = 2, 128


def _from_parameter(t) -> bool:
    """Whether ``t`` is a cast (or transpose) of a parameter: autocast's weight copies."""
    fn = t.grad_fn
    while fn is not None and fn.name() in ('ToCopyBackward0', 'TBackward0',
                                           'TransposeBackward0', 'PermuteBackward0'):
        nxt = [f for f, _ in fn.next_functions if f is not None]
        fn = nxt[0] if nxt else None
    return fn is not None and fn.name() == 'torch::autograd::AccumulateGrad' \
        and t.grad_fn is not None and t.grad_fn.name() != 'torch::autograd::AccumulateGrad'


def _layer_saved_bytes(config: dict, precision: str, attention: str) -> list[int]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.groundtruth.measure import CudaAutocastPolicy

    cfg = AutoConfig.for_model(**config)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention)
    if precision == 'bf16':
        model = model.to(torch.bfloat16)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    where = ['embedding']
    seen: dict[int, tuple[str, int]] = {}
    alive = []  # a storage freed in forward must not lend its address to another

    def pack(t):
        alive.append(t)
        st = t.untyped_storage()
        if st.data_ptr() not in params and not _from_parameter(t):
            seen.setdefault(st.data_ptr(), (where[0], st.nbytes()))
        return t

    layers = model.model.layers
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda mod, a, i=i: where.__setitem__(0, f'L{i}'))
        layer.register_forward_hook(lambda mod, a, o: where.__setitem__(0, 'head'))
    ids = torch.randint(0, config['vocab_size'], (B, S))
    autocast = (torch.autocast('cpu', dtype=torch.bfloat16) if precision == 'amp-bf16'
                else contextlib.nullcontext())
    with CudaAutocastPolicy(), autocast, \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids)
    totals: dict[str, int] = {}
    for name, nbytes in seen.values():
        totals[name] = totals.get(name, 0) + nbytes
    return [totals[f'L{i}'] for i in range(len(layers))]


CASES = [(name, precision)
         for name in ('mixtral', 'qwen2_moe', 'qwen3_moe', 'qwen3_moe-norm-topk', 'gpt_oss')
         for precision in ('fp32', 'amp-bf16', 'bf16')]


@pytest.mark.parametrize(('name', 'precision'), CASES, ids=lambda v: str(v))
def test_a_moe_layer_saves_what_batchfit_counts(name, precision):
    config = dict(CONFIGS[name.removesuffix('-norm-topk')])
    if name.endswith('-norm-topk'):
        config['norm_topk_prob'] = True  # Qwen3-30B-A3B's config.json sets it
    attention = 'eager' if name == 'gpt_oss' else 'sdpa'  # GPT-OSS's sinks run eager
    got = _layer_saved_bytes(config, precision, attention)[1]
    spec = spec_from_hf_config(config)
    assert spec.moe is not None
    got -= 4 * spec.moe.num_experts  # grouped_mm's int32 offsets: per layer
    one = np.ones(())
    est = float(hf_layer_terms(spec, RECIPES[precision],
                               'flash' if attention == 'sdpa' else 'eager', 'none').bytes(
        B * one, S * one, one, one, np.zeros((), bool), spec.hidden_size, spec.num_heads))
    assert est >= got, (name, precision, est, got)
    assert est == pytest.approx(got, rel=0.01), (name, precision, est, got)
