"""Synthetic calibration profiles and a tiny model for the calibration tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from planner.calibrate.records import SCHEMA, model_spec_to_dict
from planner.models.spec import ModelSpec

TINY = ModelSpec(name='tiny-llama', num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4,
                 head_dim=16, ffn_size=256, vocab_size=512, max_position_embeddings=256)
TINY_CONFIG = {'model_type': 'llama', 'num_hidden_layers': 2, 'hidden_size': 64,
               'num_attention_heads': 4, 'num_key_value_heads': 4, 'intermediate_size': 256,
               'vocab_size': 512, 'max_position_embeddings': 256}
H100_UUID = 'GPU-11111111-2222-3333-4444-555555555555'
GIB = 2**30


def write_tiny_config(folder: Path) -> Path:
    """A Hugging Face config.json of the tiny model."""
    path = folder / 'config.json'
    path.write_text(json.dumps(TINY_CONFIG), encoding='utf-8')
    return path


def profile_doc(device: str = 'cuda', *, created: str = '2026-05-01T12:00:00Z',
                uuid: str | None = H100_UUID, name: str = 'NVIDIA H100 80GB HBM3',
                catalog_key: str | None = 'h100-sxm', model: ModelSpec = TINY,
                **overrides: Any) -> dict[str, Any]:
    """A valid ``batchfit.calibration/1`` document (``overrides`` replace top-level keys)."""
    cpu = device == 'cpu'
    doc = {
        'schema': SCHEMA, 'created': created, 'batchfit_version': '0.1.0',
        'device': {'kind': device, 'name': 'CPU test' if cpu else name,
                   'uuid': None if cpu else uuid, 'catalog_key': None if cpu else catalog_key,
                   'memory_bytes': 8 * GIB if cpu else 80 * GIB,
                   'compute_capability': None if cpu else '9.0', 'count': 1},
        'environment': {'torch_version': '2.13.0', 'cuda_version': None if cpu else '12.8',
                        'cudnn_version': None, 'nccl_version': None, 'python_version': '3.11.7',
                        'allocator_config': 'expandable_segments:True',
                        'expandable_segments': True,
                        'cuda_context_bytes': 0 if cpu else 600 * 2**20, 'cpu_threads': 1},
        'model': model_spec_to_dict(model), 'seq_len': 64,
        'precision': 'fp32' if cpu else 'amp-bf16', 'attention': 'flash',
        'matmul': [{'name': 'qkv', 'tokens': 64, 'k': 64, 'n': 192, 'time_s': 1e-4,
                    'flops': 6.0 * 64 * 64 * 192}],
        'peak_flops_per_s': {'fp32': 1e11} if cpu else {'bf16': 7e14, 'fp32': 5e13},
        'steps': [{'layers': 1, 'micro_batch': 1, 'seq_len': 64, 'forward_backward_s': 0.002,
                   'optimizer_s': 0.001, 'repeats': 5, 'peak_allocated_bytes': 2_600_000,
                   'peak_reserved_bytes': 2_600_000, 'num_alloc_retries': 0, 'num_ooms': 0,
                   'estimated_tensor_peak_bytes': 2_600_000,
                   'fake_tensor_peak_bytes': 2_600_000, 'memory_source': 'memtracker',
                   'for_efficiency': True}],
        'step_time': {'compute_dtype': 'fp32' if cpu else 'bf16',
                      'reference_peak_flops_per_s': 1e11 if cpu else 989e12,
                      'reference': 'measured' if cpu else 'catalog:h100-sxm',
                      'memory_bandwidth_bytes_per_s': 2e10 if cpu else 3e12,
                      'efficiency_points': [[1e6, 0.3], [1e9, 0.45]],
                      'overhead_s': 0.002, 'overhead_fixed_s': 0.0005,
                      'overhead_per_layer_s': 0.00075,
                      'full_depth_step_s': [[1, 64, 0.004]], 'max_residual_fraction': 0.02},
        'memory': {'cuda_context_bytes': 0 if cpu else 600 * 2**20,
                   'workspace_bytes': 0 if cpu else 100 * 2**20,
                   'nccl_bytes': 0 if cpu else 256 * 2**20,
                   'allocator_fraction': 0.0 if cpu else 0.12, 'estimator_ratio': 1.0,
                   'full_depth_peak_bytes': [[1, 64, 3_900_000, 3_900_000]]},
        'max_micro_batch': {'capacity_bytes': 8 * GIB if cpu else 80 * GIB, 'predicted': 100,
                            'confirmed': 100, 'probes': []},
        'collectives': None, 'notes': [], 'elapsed_s': 10.0,
    }
    doc.update(copy.deepcopy(overrides))
    return doc


def write_profile(folder: Path, doc: dict[str, Any], name: str = 'p.json') -> Path:
    """Write ``doc`` as a profile file in ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(doc), encoding='utf-8')
    return path
