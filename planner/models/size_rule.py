"""A Llama-style shape for a bare size such as ``7B``, ``350M`` or ``1T``.

When the user names only a size, batchfit needs some concrete shape to count
memory and FLOPs. The rule below builds modern decoder shapes (RoPE, RMSNorm,
SwiGLU, no biases) and picks the one whose exact parameter count is nearest the
request; it lands within 5 % for every size from 10M to 2T (usually within 1 %).

The rule:

* **Width** ``h``: multiples of 64 below 1024, of 128 up to 3072, then of 1024
  (so that the head count is a multiple of the 8 KV heads).
* **Heads**: ``head_dim`` 64 below ``h = 2048``, 128 from there on;
  ``heads = h / head_dim``.
* **KV heads**: full multi-head attention below ``h = 3072`` (about 3B
  parameters), grouped-query attention with 8 KV heads from there on.
* **MLP**: SwiGLU of width ``8h/3`` rounded up to a multiple of 256 (of 1024 from
  ``h = 8192``), as Llama does.
* **Vocabulary**: 32,000 (Llama-2's tokenizer); embeddings tied below
  ``h = 2048`` as small models usually do, untied above.
* **Depth**: for every width, the whole number of layers that brings the count
  nearest the target. Among the shapes within 2 % of the target, the one whose
  depth is nearest the *preferred depth* for its width wins: a log-log
  interpolation of known shapes (GPT-2 small 768/12, GPT-2 medium 1024/24,
  GPT-3 XL 2048/24, Llama 7B 4096/32, 13B 5120/40, 70B 8192/80, GPT-3 12288/96,
  Llama-3.1-405B 16384/126, Megatron 1T 25600/128), extended at constant
  width/depth ratio past both ends. When no shape is within 2 % (tiny sizes,
  where the embedding dominates), the nearest count wins.
"""

from __future__ import annotations

import math
import re
from functools import cache
from itertools import pairwise

from planner.errors import InputError
from planner.models.spec import ModelSpec

MIN_PARAMS = 10e6
MAX_PARAMS = 10e12
VOCAB_SIZE = 32_000
MAX_LAYERS = 512
MATCH_TOLERANCE = 0.02  # shapes this close to the target compete on depth, not count

# (hidden, layers) of published models, in order of width: the preferred depth.
_KNOWN_SHAPES: tuple[tuple[int, int], ...] = (
    (768, 12), (1024, 24), (2048, 24), (4096, 32), (5120, 40), (8192, 80),
    (12288, 96), (16384, 126), (25600, 128),
)
_UNITS = {'k': 1e3, 'm': 1e6, 'b': 1e9, 't': 1e12}
_SIZE_RE = re.compile(r'^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmbt])\s*$', re.IGNORECASE)


def parse_size(text: str) -> float | None:
    """The parameter count a size such as ``7B`` or ``1.5b`` names, or None."""
    match = _SIZE_RE.match(text)
    if match is None:
        return None
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


def spec_from_size(text: str) -> ModelSpec:
    """A Llama-style :class:`ModelSpec` with about ``text`` parameters.

    Args:
        text: a number with a unit, ``K``, ``M``, ``B`` or ``T`` (``350M``, ``7B``,
            ``1.5b``, ``1T``), case-insensitive.

    Raises:
        InputError: ``text`` is not a size, or is outside 10M to 10T.
    """
    target = parse_size(text)
    allowed = 'a size from 10M to 10T, such as 350M, 7B or 1.5T'
    if target is None:
        raise InputError('--model', f'{text!r} is not a size', allowed)
    if not MIN_PARAMS <= target <= MAX_PARAMS:
        raise InputError('--model', f'{text.strip()} is outside the sizes the rule covers',
                         allowed)
    hidden, layers = _best_shape(target)
    label = text.strip().upper()
    spec = _shape(hidden, layers, name=f'{label} (size rule)')
    return spec.with_changes(source=(
        f'size rule for {label} (planner.models.size_rule): {layers} layers, hidden {hidden}, '
        f'{spec.num_heads} heads / {spec.num_kv_heads} KV, SwiGLU {spec.ffn_size}, '
        f'vocab {VOCAB_SIZE}; {spec.total_params():,} parameters'))


def preferred_depth(hidden: int) -> float:
    """Layers a well-proportioned model of width ``hidden`` has (log-log interpolation)."""
    shapes = _KNOWN_SHAPES
    if hidden <= shapes[0][0]:
        return shapes[0][1] * hidden / shapes[0][0]
    if hidden >= shapes[-1][0]:
        return shapes[-1][1] * hidden / shapes[-1][0]
    for (h0, l0), (h1, l1) in pairwise(shapes):
        if h0 <= hidden <= h1:
            t = math.log(hidden / h0) / math.log(h1 / h0)
            return math.exp(math.log(l0) + t * math.log(l1 / l0))
    raise AssertionError('unreachable')  # pragma: no cover


def _widths() -> list[int]:
    return [*range(128, 1024, 64), *range(1024, 3072, 128), *range(3072, 65536 + 1, 1024)]


def _shape(hidden: int, layers: int, name: str = 'size rule') -> ModelSpec:
    head_dim = 64 if hidden < 2048 else 128
    heads = hidden // head_dim
    multiple = 256 if hidden < 8192 else 1024
    ffn = -(-8 * hidden // (3 * multiple)) * multiple
    return ModelSpec(
        name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
        num_kv_heads=heads if hidden < 3072 else 8, head_dim=head_dim, ffn_size=ffn,
        vocab_size=VOCAB_SIZE, tied_embeddings=hidden < 2048,
        # a LlamaConfig builds this shape (RoPE, RMSNorm, SwiGLU, no biases, tied or not)
        hf_model_type='llama')


@cache
def _fixed_and_per_layer(hidden: int) -> tuple[int, int]:
    one = _shape(hidden, 1)
    per_layer = one.layer_params()
    return one.total_params() - per_layer, per_layer


def _best_shape(target: float) -> tuple[int, int]:
    """(hidden, layers) chosen by the rule in the module docstring."""
    candidates: list[tuple[float, float, int, int]] = []  # (count error, depth error, h, L)
    for hidden in _widths():
        fixed, per_layer = _fixed_and_per_layer(hidden)
        ideal = (target - fixed) / per_layer
        for layers in {math.floor(ideal), math.ceil(ideal)}:
            if 1 <= layers <= MAX_LAYERS:
                error = abs(fixed + layers * per_layer - target) / target
                depth_error = abs(math.log(layers / preferred_depth(hidden)))
                candidates.append((error, depth_error, hidden, layers))
    close = [c for c in candidates if c[0] <= MATCH_TOLERANCE]
    _, _, hidden, layers = (min(close, key=lambda c: c[1]) if close else min(candidates))
    return hidden, layers
