"""The LoRA notes of the PEFT-based exports, run through PEFT and transformers themselves.

HF Trainer, accelerate, DeepSpeed, torchrun, Lightning and Slurm exports of a LoRA plan
keep their command and add a ``NOTE`` with the exact ``LoraConfig`` (and, for QLoRA, the
``BitsAndBytesConfig``) the training script must apply. Here those calls are evaluated
with the real classes (unknown keywords raise), applied with ``get_peft_model`` to a
small model of the same architecture, and the adapters PEFT builds are compared with
what batchfit planned: the same modules, ``lora_params`` trainable elements, in fp32.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from planner.export import export_plan
from planner.memory.model_states import lora_params
from planner.memory.training import LoraSpec
from planner.models.hf_config import spec_from_hf_config
from tests.export_helpers import make_plan

torch = pytest.importorskip('torch')
peft = pytest.importorskip('peft')
transformers = pytest.importorskip('transformers')
pytestmark = pytest.mark.filterwarnings('ignore::FutureWarning', 'ignore::UserWarning')

FORMATS = ('hf', 'accelerate', 'torchrun', 'lightning', 'slurm')  # the hf stack's
ALL_LINEAR = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')


def call_text(note: str, name: str) -> str:
    """The ``name(...)`` call written in ``note``, parentheses balanced."""
    start = note.index(f'{name}(')
    depth = 0
    for end in range(start + len(name), len(note)):
        depth += {'(': 1, ')': -1}.get(note[end], 0)
        if depth == 0:
            return note[start:end + 1]
    raise AssertionError(f'unbalanced {name} call in {note!r}')


def build(call: str, cls):
    """``cls`` built from the call text; every keyword must be one of its parameters
    (BitsAndBytesConfig takes **kwargs and only logs unknown ones)."""
    keywords = {k.arg for k in ast.parse(call, mode='eval').body.keywords}
    unknown = keywords - set(inspect.signature(cls).parameters)
    if unknown:
        raise TypeError(f'{cls.__name__} has no parameter(s) {sorted(unknown)}')
    return eval(call, {cls.__name__: cls, 'torch': torch})  # our own export text


def configs(note: str):
    """(LoraConfig, BitsAndBytesConfig or None) built by the real classes from a note."""
    lora = build(call_text(note, 'LoraConfig'), peft.LoraConfig)
    bnb = (build(call_text(note, 'BitsAndBytesConfig'), transformers.BitsAndBytesConfig)
           if 'BitsAndBytesConfig(' in note else None)
    return lora, bnb


def lora_note(plan, fmt: str) -> str:
    notes = [n for n in export_plan(plan, fmt).notes if 'LoraConfig(' in n]
    assert len(notes) == 1, notes
    return notes[0]


def trainable(model, config) -> tuple[int, set, set]:
    """PEFT's adapters on ``model``: elements, dtypes, and the adapted module names."""
    wrapped = peft.get_peft_model(model, config)
    params = [p for p in wrapped.parameters() if p.requires_grad]
    adapted = {name.rsplit('.', 1)[-1] for name, module in wrapped.named_modules()
               if hasattr(module, 'lora_A') and module.lora_A}
    return sum(p.numel() for p in params), {p.dtype for p in params}, adapted


LLAMA = {'hidden_size': 64, 'intermediate_size': 160, 'num_hidden_layers': 2,
         'num_attention_heads': 4, 'num_key_value_heads': 2, 'vocab_size': 128, 'head_dim': 16}


@pytest.mark.parametrize('fmt', FORMATS)
@pytest.mark.parametrize(('targets', 'base_bits', 'zero'), [
    (('q', 'v'), 16, 0), (('q', 'k', 'v', 'o'), 16, 2), (ALL_LINEAR, 4, 3), (('v', 'down'), 4, 1)])
def test_llama_lora_note_builds_the_planned_adapters(fmt, targets, base_bits, zero):
    lora = LoraSpec(8, targets, base_bits)
    plan = make_plan(nodes=1, zero=zero, global_batch=64, lora=lora)
    config, bnb = configs(lora_note(plan, fmt))
    assert config.r == 8
    assert config.lora_dropout == 0.0
    if base_bits == 4:
        assert bnb.load_in_4bit
        assert bnb.bnb_4bit_quant_type == 'nf4'
        assert bnb.bnb_4bit_use_double_quant
        assert bnb.bnb_4bit_compute_dtype == torch.bfloat16
        # FSDP / ZeRO-3 shard the packed weights only with a float storage type
        assert (bnb.bnb_4bit_quant_storage == torch.bfloat16) == (zero == 3)
    else:
        assert bnb is None
    hf_config = transformers.LlamaConfig(**LLAMA)
    model = transformers.LlamaForCausalLM(hf_config).to(torch.bfloat16)  # the base's dtype
    count, dtypes, adapted = trainable(model, config)
    expected = lora_params(spec_from_hf_config(hf_config.to_dict()), lora)
    assert count == expected
    assert dtypes == {torch.float32}  # PEFT's autocast_adapter_dtype, as planned
    assert adapted == {f'{t}_proj' for t in targets}


def test_phi3_fused_projections_get_one_adapter_each():
    lora = LoraSpec(4, ('q', 'v', 'up'))
    plan = make_plan(model='phi-3-mini', nodes=1, zero=0, global_batch=64, micro_batch=1,
                     lora=lora)
    config, _ = configs(lora_note(plan, 'hf'))
    hf_config = transformers.Phi3Config(hidden_size=64, intermediate_size=160,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=4, vocab_size=128, pad_token_id=0)
    count, _, adapted = trainable(transformers.Phi3ForCausalLM(hf_config), config)
    assert adapted == {'qkv_proj', 'gate_up_proj'}
    assert count == lora_params(spec_from_hf_config(hf_config.to_dict()), lora)


def test_a_typo_in_a_config_call_would_be_caught():
    with pytest.raises(TypeError):
        configs("LoraConfig(r=8, target_module=['q_proj'], task_type='CAUSAL_LM')")
    with pytest.raises(TypeError):
        configs("LoraConfig(r=8, task_type='CAUSAL_LM'), "
                "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_typ='nf4')")
