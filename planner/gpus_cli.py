"""`batchfit gpus`: the GPU and interconnect catalog (and, with NVML, the local GPUs)."""

from __future__ import annotations

import argparse
import json


def add_gpus_command(sub) -> None:
    """Register ``batchfit gpus`` on the CLI's subparsers."""
    gpus = sub.add_parser('gpus', help='list the GPU and interconnect catalog')
    gpus.add_argument('--catalog', action='store_true', help='the built-in catalog')
    gpus.add_argument('--json', action='store_true')
    gpus.set_defaults(run=_cmd_gpus)


def _cmd_gpus(args: argparse.Namespace) -> int:
    from planner.catalog import load_gpus, load_interconnects

    gpus, links = load_gpus(), load_interconnects()
    if args.json:
        print(json.dumps({
            'gpus': [{'key': g.key, 'name': g.name, 'memory_bytes': g.memory_bytes,
                      'peak_flops': g.peak_flops,
                      'hbm_bandwidth_bytes_per_s': g.hbm_bandwidth_bytes_per_s,
                      'intra_node_link': g.intra_node_link,
                      'intra_node_bandwidth_bytes_per_s': g.intra_node_bandwidth_bytes_per_s,
                      'price_per_gpu_hour_usd': g.price_per_gpu_hour_usd,
                      'source': g.source} for g in gpus.values()],
            'interconnects': [{'key': li.key, 'name': li.name,
                               'bandwidth_bytes_per_s': li.bandwidth_bytes_per_s,
                               'latency_s': li.latency_s} for li in links.values()],
        }, indent=2))
        return 0
    print(f'{"gpu":<16}{"memory":>11}{"bf16 TF/s":>11}{"HBM TB/s":>10}  {"link":<26}name')
    for g in gpus.values():
        bf16 = g.peak('bf16') / 1e12
        print(f'{g.key:<16}{g.memory_bytes / 2**30:>8.1f} GiB{bf16:>11.1f}'
              f'{g.hbm_bandwidth_bytes_per_s / 1e12:>10.2f}  {g.intra_node_link:<26}{g.name}')
    print()
    print(f'{"interconnect":<16}{"GB/s per GPU":>14}  name')
    for li in links.values():
        print(f'{li.key:<16}{li.bandwidth_bytes_per_s / 1e9:>14.1f}  {li.name}')
    return 0
