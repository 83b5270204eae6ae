"""A :class:`ModelSpec` from a Hugging Face ``config.json``, read as plain JSON.

Nothing is downloaded and no remote code runs: ``auto_map`` and custom classes
are ignored; each supported ``model_type`` has a reader that knows where its
family keeps each size and which defaults ``transformers`` applies when a key is
absent (or ``null``). Multimodal wrappers are read through their ``text_config``.

Known gaps, where ``ModelSpec`` cannot say what the checkpoint holds:

* ``qwen2_moe``: the ``h x 1`` shared-expert gate of each layer is not counted
  (2,048 parameters a layer for Qwen1.5-MoE-A2.7B).
* ``olmo2``: its q/k RMSNorms span all heads, not one head, so each layer has
  ``q_size + kv_size - 2*head_dim`` more norm weights than counted.
* GPT-2 and Phi-3 have separate embedding and residual dropouts; ``hidden_dropout``
  takes the residual one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.models.spec import ModelSpec, MoESpec

FILE = 'config.json'
GENERIC_FIELDS = ('num_hidden_layers', 'hidden_size', 'num_attention_heads',
                  'intermediate_size', 'vocab_size')

# transformers' ACT2FN names -> ModelSpec activations.
ACTIVATIONS: dict[str, str] = {
    'silu': 'silu', 'swish': 'silu', 'gelu': 'gelu', 'gelu_python': 'gelu',
    'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh', 'gelu_fast': 'gelu_tanh',
    'gelu_accurate': 'gelu_tanh', 'relu': 'relu', 'relu2': 'relu2',
}
# GELUs transformers writes as Python ops (autograd saves more; see planner.memory.activations).
PYTHON_GELUS = frozenset({'gelu_new', 'gelu_fast', 'gelu_accurate', 'gelu_python'})
_REQUIRED = object()
Config = Mapping[str, Any]


def spec_from_hf_config(config: str | os.PathLike[str] | Config,
                        name: str | None = None) -> ModelSpec:
    """Read a model's shape from a ``config.json`` file, its folder, or its parsed dict.

    Args:
        config: a path to ``config.json``, a folder holding one, or the parsed JSON.
        name: the spec's name; by default ``_name_or_path``, else the folder's (or
            file's) name, else the ``model_type``.

    Raises:
        InputError: the file is unreadable or not JSON, the ``model_type`` is not
            supported and the generic fields are missing, or a field is missing,
            of the wrong type or out of range (the error names the field).
    """
    if isinstance(config, Mapping):
        raw, origin, default_name = dict(config), 'a config.json dict', ''
    else:
        path = Path(config)
        if path.is_dir():
            path = path / FILE
        raw, origin = _read_json(path), str(path)
        default_name = path.parent.name if path.name == FILE else path.stem
    cfg = _text_config(raw)
    model_type = cfg.get('model_type')
    reader = _READERS.get(model_type) if isinstance(model_type, str) else None
    if reader is not None:
        values = reader(cfg)
        how = f'model_type {model_type}'
    elif (kind := _not_causal_decoder(cfg, model_type)) is not None:
        raise InputError(FILE, f'model_type {model_type!r} is {kind}, not a causal '
                         'decoder: batchfit plans decoder-only language models',
                         ', '.join(_READERS) + ', or another causal decoder with the fields '
                         + ', '.join(GENERIC_FIELDS))
    elif all(cfg.get(key) is not None for key in GENERIC_FIELDS):
        values = _llama_like(cfg, tie=False)
        how = (f'model_type {model_type!r} read generically as a Llama-style decoder '
               '(RMSNorm, SwiGLU, RoPE, no biases); check the result')
    else:
        raise InputError(FILE, f'unsupported model_type {model_type!r}; supported: '
                         f'{", ".join(_READERS)}; or give the fields '
                         f'{", ".join(GENERIC_FIELDS)} (and optionally num_key_value_heads, '
                         'head_dim, tie_word_embeddings)')
    label = name or _str(raw, '_name_or_path', '') or default_name or str(model_type)
    values = {**_launcher_fields(cfg), **values}  # a reader's own values win
    # the class the checkpoint loads as is the top level's (Gemma-3's "gemma3" wraps its
    # "gemma3_text"): transformers' AutoConfig and Liger's _apply_liger_kernel_to_instance
    # read config.model_type (linkedin/Liger-Kernel src/liger_kernel/transformers/monkey_patch.py)
    top_type = raw.get('model_type') or model_type
    values['hf_model_type'] = top_type if isinstance(top_type, str) else ''
    spec = ModelSpec(name=label, source=f'{origin} ({how})', **values)
    if model_type in _NOTES:
        spec = spec.with_changes(source=f'{spec.source}; {_NOTES[model_type](spec)}')
    return spec


# Families that are not causal decoders: encoders (masked-LM objectives, bidirectional
# attention) and encoder-decoders (transformers' model_type names).
_NOT_DECODERS: dict[str, str] = {
    **dict.fromkeys((
        'bert', 'roberta', 'xlm-roberta', 'distilbert', 'albert', 'electra', 'deberta',
        'deberta-v2', 'mpnet', 'camembert', 'ernie', 'modernbert', 'nomic_bert',
        'xlm-roberta-xl', 'megatron-bert', 'rembert', 'roformer', 'funnel', 'longformer',
        'big_bird', 'layoutlm', 'vit', 'clip', 'siglip', 'wav2vec2', 'hubert'), 'an encoder'),
    **dict.fromkeys((
        't5', 'mt5', 'umt5', 'longt5', 'bart', 'mbart', 'pegasus', 'marian', 'whisper',
        'led', 'prophetnet', 'switch_transformers', 'plbart', 'fsmt', 'blenderbot'),
        'an encoder-decoder'),
}
_DECODER_HEADS = ('ForCausalLM', 'LMHeadModel', 'ForConditionalGeneration')


def _not_causal_decoder(cfg: Config, model_type: Any) -> str | None:
    """What the config describes when it is not a causal decoder (None when it may be):
    a known encoder or encoder-decoder family, ``is_encoder_decoder``, or only
    non-generative heads in ``architectures`` (``BertForMaskedLM``...)."""
    if isinstance(model_type, str) and model_type in _NOT_DECODERS:
        return _NOT_DECODERS[model_type]
    if cfg.get('is_encoder_decoder') is True:
        return 'an encoder-decoder'
    archs = cfg.get('architectures')
    if (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)
            and not any(a.endswith(_DECODER_HEADS) for a in archs)):
        return f'an encoder or classifier ({", ".join(archs[:3])})'
    return None


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) and value > 0 else None


def _launcher_fields(cfg: Config) -> dict[str, Any]:
    """RoPE base, Llama-3 RoPE scaling, rotary share and norm epsilon, where given.

    Keys as transformers writes them: ``rope_theta`` (``rotary_emb_base`` in GPT-NeoX),
    ``rope_scaling`` with ``rope_type``/``type`` ``llama3`` and its ``factor``
    (transformers 5 nests both in ``rope_parameters``), ``partial_rotary_factor``
    (``rotary_pct``), ``rms_norm_eps`` (``layer_norm_eps``, ``layer_norm_epsilon``).
    """
    rope = cfg.get('rope_parameters')
    rope = rope if isinstance(rope, Mapping) else {}
    scaling = cfg.get('rope_scaling') or rope
    scaling = scaling if isinstance(scaling, Mapping) else {}
    out: dict[str, Any] = {}
    base = next((_number(v) for v in (rope.get('rope_theta'), cfg.get('rope_theta'),
                                      cfg.get('rotary_emb_base')) if _number(v)), None)
    if base is not None:
        out['rope_base'] = base
    if scaling.get('rope_type', scaling.get('type')) == 'llama3' and _number(
            scaling.get('factor')):
        out['rope_scaling_factor'] = _number(scaling.get('factor'))
    fraction = _number(cfg.get('partial_rotary_factor', cfg.get('rotary_pct')))
    if fraction is not None and fraction <= 1.0:
        out['rotary_fraction'] = fraction
    eps = next((_number(cfg.get(k)) for k in ('rms_norm_eps', 'layer_norm_eps',
                                              'layer_norm_epsilon', 'norm_epsilon')
                if _number(cfg.get(k))), None)
    if eps is not None and eps < 1.0:
        out['norm_eps'] = eps
    return out


def _read_json(path: Path) -> dict[str, Any]:
    from planner import untrusted

    try:
        raw = untrusted.loads_json(untrusted.read_text(path, 'config.json'), str(path))
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise InputError(FILE, f'{path} does not exist') from exc
    except InputError as exc:  # the field is config.json (callers name the path)
        raise InputError(FILE, str(exc)[len(exc.field) + 2:]) from None
    if not isinstance(raw, dict):
        raise InputError(FILE, f'{path} must hold a JSON object, not {type(raw).__name__}')
    return raw


def _text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The language model's part: ``text_config`` when the top level has no sizes."""
    inner = raw.get('text_config')
    has_sizes = any(key in raw for key in ('hidden_size', 'n_embd', 'num_hidden_layers'))
    if has_sizes or not isinstance(inner, dict):
        return raw
    merged = {key: value for key, value in raw.items()
              if key not in ('text_config', 'vision_config', 'model_type')}
    merged.update(inner)  # the text model's own keys win
    if 'model_type' not in inner and raw.get('model_type') == 'gemma3':
        merged['model_type'] = 'gemma3_text'
    return merged


# ---- typed field readers -----------------------------------------------------------
def _int(cfg: Config, key: str, default: Any = _REQUIRED) -> int:
    """A positive integer; ``null`` counts as absent, as transformers treats it."""
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise InputError(key, f'missing from {FILE}')
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(key, f'must be an integer in {FILE}, got {value!r}')
    if value <= 0:
        raise InputError(key, f'must be positive, got {value}')
    return value


def _bool(cfg: Config, key: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InputError(key, f'must be true or false in {FILE}, got {value!r}')
    return value


def _prob(cfg: Config, key: str, default: float = 0.0) -> float:
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError(key, f'must be a probability in [0, 1), got {value!r}')
    return float(value)


def _str(cfg: Config, key: str, default: str) -> str:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise InputError(key, f'must be a string in {FILE}, got {value!r}')
    return value


def _activation(cfg: Config, key: str, default: str) -> dict[str, Any]:
    """``activation`` and ``python_gelu`` from an ACT2FN name."""
    value = _str(cfg, key, default)
    if value not in ACTIVATIONS:
        raise InputError(key, f'unsupported activation {value!r}', ', '.join(ACTIVATIONS))
    return {'activation': ACTIVATIONS[value], 'python_gelu': value in PYTHON_GELUS}


def _int_list(cfg: Config, key: str) -> list[int]:
    value = cfg.get(key) or []
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise InputError(key, f'must be a list of layer indices, got {value!r}')
    return value


# ---- families ----------------------------------------------------------------------
def _llama_like(cfg: Config, *, tie: bool, head_dim: int | None = None,
                max_positions: int = 4096, act_key: str = 'hidden_act',
                act: str = 'silu') -> dict[str, Any]:
    """Fields every Llama-descended config spells the same way."""
    hidden = _int(cfg, 'hidden_size')
    heads = _int(cfg, 'num_attention_heads')
    if cfg.get('head_dim') is None and head_dim is None and hidden % heads:
        raise InputError('head_dim', f'missing, and hidden_size {hidden} is not a multiple '
                         f'of num_attention_heads {heads}')
    return {
        'num_layers': _int(cfg, 'num_hidden_layers'), 'hidden_size': hidden,
        'num_heads': heads, 'num_kv_heads': _int(cfg, 'num_key_value_heads', heads),
        'head_dim': _int(cfg, 'head_dim', head_dim or hidden // heads),
        'ffn_size': _int(cfg, 'intermediate_size'), 'vocab_size': _int(cfg, 'vocab_size'),
        'tied_embeddings': _bool(cfg, 'tie_word_embeddings', tie),
        'max_position_embeddings': _int(cfg, 'max_position_embeddings', max_positions),
        **_activation(cfg, act_key, act),
        'attention_dropout': _prob(cfg, 'attention_dropout'),
    }


def _all_attn_bias(cfg: Config, default: bool = False) -> dict[str, bool]:
    """``attention_bias`` puts a bias on q, k, v and o alike (Llama, Gemma, Qwen3)."""
    bias = _bool(cfg, 'attention_bias', default)
    return {'qkv_bias': bias, 'attn_out_bias': bias}


def _llama(cfg: Config) -> dict[str, Any]:
    return {**_llama_like(cfg, tie=False, max_positions=2048), **_all_attn_bias(cfg),
            'mlp_bias': _bool(cfg, 'mlp_bias', False)}


def _mistral(cfg: Config) -> dict[str, Any]:
    return _llama_like(cfg, tie=False, max_positions=4096 * 32)


def _mixtral(cfg: Config) -> dict[str, Any]:
    values = _mistral(cfg)
    values['moe'] = MoESpec(num_experts=_int(cfg, 'num_local_experts', 8),
                            top_k=_int(cfg, 'num_experts_per_tok', 2),
                            expert_ffn_size=values['ffn_size'])
    return values


def _qwen2(cfg: Config) -> dict[str, Any]:
    # q, k and v always carry a bias in Qwen2; the output projection never does.
    return {**_llama_like(cfg, tie=False, max_positions=32768), 'qkv_bias': True}


def _qwen3(cfg: Config) -> dict[str, Any]:
    return {**_llama_like(cfg, tie=False, head_dim=128, max_positions=32768),
            **_all_attn_bias(cfg), 'qk_norm': True}


def _moe_layers(cfg: Config, num_layers: int) -> int:
    """Leading dense layers of a Qwen-MoE config (``mlp_only_layers``, sparse step)."""
    step = _int(cfg, 'decoder_sparse_step', 1)
    dense_only = set(_int_list(cfg, 'mlp_only_layers'))
    dense = [i for i in range(num_layers) if i in dense_only or (i + 1) % step]
    if dense != list(range(len(dense))):
        raise InputError('mlp_only_layers', 'dense layers between MoE layers cannot be '
                         'modelled; only leading dense layers can',
                         'decoder_sparse_step 1 and mlp_only_layers [0, 1, ..., k-1]')
    return len(dense)


def _qwen2_moe(cfg: Config) -> dict[str, Any]:
    values = _qwen2(cfg)
    shared = _int(cfg, 'shared_expert_intermediate_size', 5632)
    values['moe'] = MoESpec(
        num_experts=_int(cfg, 'num_experts', 60), top_k=_int(cfg, 'num_experts_per_tok', 4),
        expert_ffn_size=_int(cfg, 'moe_intermediate_size', 1408),
        shared_experts=1, shared_ffn_size=shared,
        first_dense_layers=_moe_layers(cfg, values['num_layers']))
    return values


def _qwen3_moe(cfg: Config) -> dict[str, Any]:
    values = _qwen3(cfg)
    values['moe'] = MoESpec(
        num_experts=_int(cfg, 'num_experts', 128), top_k=_int(cfg, 'num_experts_per_tok', 8),
        expert_ffn_size=_int(cfg, 'moe_intermediate_size', 768),
        first_dense_layers=_moe_layers(cfg, values['num_layers']))
    return values


def _gpt_oss(cfg: Config) -> dict[str, Any]:
    # transformers src/transformers/models/gpt_oss/modeling_gpt_oss.py: biased q/k/v/o,
    # one learned sink logit per head, batched experts with gate_up and down biases, a
    # biased router; sliding-window layers alternate with full ones (two eager masks); the
    # eager softmax runs in the logits' dtype.
    values = {**_llama_like(cfg, tie=False, max_positions=131072),
              **_all_attn_bias(cfg, True), 'mlp_bias': True, 'attention_sinks': True,
              'clamped_glu': True, 'softmax_fp32': False,
              # GptOssRMSNorm multiplies by its weight in fp32:
              # ``(self.weight * hidden_states).to(input_dtype)``
              'norm_fp32': True,
              'attention_masks': 2 if cfg.get('sliding_window') else 1}
    values['moe'] = MoESpec(num_experts=_int(cfg, 'num_local_experts', 128),
                            top_k=_int(cfg, 'num_experts_per_tok', 4),
                            expert_ffn_size=values['ffn_size'], router_bias=True)
    return values


def _gemma(cfg: Config) -> dict[str, Any]:
    # transformers runs Gemma's MLP on `hidden_activation` and, when that is unset,
    # on the tanh GeLU whatever `hidden_act` says (the first configs said "gelu").
    return {**_llama_like(cfg, tie=True, head_dim=256, max_positions=8192,
                          act_key='hidden_activation', act='gelu_pytorch_tanh'),
            **_all_attn_bias(cfg), 'norm_fp32': True}


def _gemma2(cfg: Config) -> dict[str, Any]:
    # pre and post norm on both blocks; soft-capping unless the config turns it off
    return {**_gemma(cfg), 'norms_per_layer': 4, 'attention_masks': 2,
            'attn_softcap': cfg.get('attn_logit_softcapping', 50.0) is not None,
            'final_logit_softcap': cfg.get('final_logit_softcapping', 30.0) is not None}


def _gemma3_text(cfg: Config) -> dict[str, Any]:
    # Gemma-3 dropped soft-capping (its config keeps the keys, null by default)
    return {**_gemma(cfg), 'norms_per_layer': 4, 'qk_norm': True, 'attention_masks': 2,
            'attn_softcap': cfg.get('attn_logit_softcapping') is not None,
            'final_logit_softcap': cfg.get('final_logit_softcapping') is not None,
            'max_position_embeddings': _int(cfg, 'max_position_embeddings', 131072)}


def _phi3(cfg: Config) -> dict[str, Any]:
    # Fused qkv_proj and gate_up_proj hold exactly the weights of separate ones.
    return {**_llama_like(cfg, tie=False, max_positions=4096),
            'hidden_dropout': _prob(cfg, 'resid_pdrop'), 'fused_qkv': True,
            'fused_gate_up': True, 'rotary_cat': True}


def _olmo2(cfg: Config) -> dict[str, Any]:
    # norms on the sublayers' outputs (post-norm), multiplying in fp32; q/k norms span
    # all heads
    return {**_llama_like(cfg, tie=False, max_positions=2048), **_all_attn_bias(cfg),
            'qk_norm': True, 'qk_norm_full_width': True, 'norm_fp32': True}


def _gpt2(cfg: Config) -> dict[str, Any]:
    hidden = _int(cfg, 'n_embd')
    heads = _int(cfg, 'n_head')
    if hidden % heads:
        raise InputError('n_head', f'{heads} does not divide n_embd {hidden}')
    return {
        'num_layers': _int(cfg, 'n_layer'), 'hidden_size': hidden, 'num_heads': heads,
        'num_kv_heads': heads, 'head_dim': hidden // heads,
        'ffn_size': _int(cfg, 'n_inner', 4 * hidden), 'vocab_size': _int(cfg, 'vocab_size'),
        'gated_mlp': False, **_activation(cfg, 'activation_function', 'gelu_new'),
        'fused_qkv': True, 'tied_embeddings': _bool(cfg, 'tie_word_embeddings', True),
        'softmax_fp32': False,  # GPT2Attention's softmax keeps the scores' dtype
        'position_embedding': 'learned',
        'max_position_embeddings': _int(cfg, 'n_positions', 1024), 'norm': 'layernorm',
        'qkv_bias': True, 'attn_out_bias': True, 'mlp_bias': True,
        'attention_dropout': _prob(cfg, 'attn_pdrop', 0.1),
        'hidden_dropout': _prob(cfg, 'resid_pdrop', 0.1),
    }


def _gpt_neox(cfg: Config) -> dict[str, Any]:
    # use_parallel_residual changes the dataflow, not the weights.
    values = _llama_like(cfg, tie=False, max_positions=2048, act='gelu')
    bias = _bool(cfg, 'attention_bias', True)
    return {**values, 'gated_mlp': False, 'norm': 'layernorm', 'qkv_bias': bias,
            'attn_out_bias': bias, 'mlp_bias': True, 'fused_qkv': True,
            'parallel_residual': _bool(cfg, 'use_parallel_residual', True),
            'rotary_cat': True,
            'hidden_dropout': _prob(cfg, 'hidden_dropout')}


_READERS: dict[str, Callable[[Config], dict[str, Any]]] = {
    'llama': _llama, 'mistral': _mistral, 'mixtral': _mixtral, 'qwen2': _qwen2,
    'qwen2_moe': _qwen2_moe, 'qwen3': _qwen3, 'qwen3_moe': _qwen3_moe, 'gemma': _gemma,
    'gemma2': _gemma2, 'gemma3_text': _gemma3_text, 'gpt2': _gpt2, 'gpt_neox': _gpt_neox,
    'phi3': _phi3, 'olmo2': _olmo2, 'gpt_oss': _gpt_oss,
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_READERS)

# What the count leaves out, for the families where ModelSpec cannot say it.
_NOTES: dict[str, Callable[[ModelSpec], str]] = {
    'qwen2_moe': lambda s: (f'not counted: the {s.hidden_size} x 1 shared-expert gate of '
                            f'each layer ({s.num_layers * s.hidden_size:,} parameters)'),
    'gpt_oss': lambda s: ('attention FLOPs counted causal over the whole sequence on '
                          'every layer: the sliding-window layers do less'),
    'olmo2': lambda s: ('not counted: q/k norms span all heads, '
                        f'{s.num_layers * (s.q_size + s.kv_size - 2 * s.head_dim):,} '
                        'more norm weights'),
}
