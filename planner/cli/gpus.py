"""`batchfit gpus`: the local GPUs through NVML, and the GPU and interconnect catalog.

``batchfit gpus`` shows this machine's GPUs (a table, then the topology matrix);
``--json`` prints the :class:`~planner.hardware.local.HardwareInventory` snapshot; ``--watch``
redraws until Ctrl-C; ``--catalog`` lists the catalog. No GPU or no driver is a normal
state: one line says why, the catalog follows, and the exit code is 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import textwrap
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, TextIO

from planner.errors import InputError
from planner.units import GIB

if TYPE_CHECKING:
    from planner.hardware.local import GpuInfo, HardwareInventory

_BAR_CELLS = 10
_CLEAR = '\x1b[H\x1b[2J'  # cursor home, clear screen
_CATALOG_HINT = 'showing the catalog: batchfit gpus --catalog'


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a number of seconds') from None
    if not 0 < value < float('inf'):
        raise argparse.ArgumentTypeError(f'{value} is out of range (allowed: > 0 seconds)')
    return value


def add_gpus_command(sub) -> None:
    """Register ``batchfit gpus`` on the CLI's subparsers."""
    gpus = sub.add_parser('gpus', help='the local GPUs (NVML); --catalog lists the catalog',
                          description='The local NVIDIA GPUs, their use and their links, '
                                      'read through NVML; with --catalog, the GPU and '
                                      'interconnect catalog.')
    gpus.add_argument('--catalog', action='store_true',
                      help='list the GPU and interconnect catalog instead')
    gpus.add_argument('--json', action='store_true',
                      help='one JSON document (with --watch, one per line)')
    gpus.add_argument('--watch', nargs='?', const=1.0, type=_seconds, metavar='SECONDS',
                      help='redraw every SECONDS (default 1) until Ctrl-C')
    gpus.set_defaults(run=_cmd_gpus)


def _cmd_gpus(args: argparse.Namespace) -> int:
    if args.catalog:
        if args.watch is not None:
            raise InputError('--watch', 'applies to the local GPUs, not to --catalog')
        return _print_catalog(args.json)
    if args.watch is not None:
        return watch(args.watch, json_output=args.json, sleep=pause)
    from planner.hardware.local import probe

    inventory = probe()
    if args.json:
        print(json.dumps(inventory.to_dict(), indent=2))
        return 0
    print(render(inventory))
    if inventory.gpus:
        return 0
    print(_CATALOG_HINT)  # no GPU is a normal state: the catalog is what batchfit plans with
    print()
    return _print_catalog(False)


# The pause between --watch frames; a module attribute so tests can replace it.
pause: Callable[[float], None] = time.sleep


def watch(seconds: float, *, json_output: bool = False, iterations: int | None = None,
          sleep: Callable[[float], None] = time.sleep,
          snapshot: Callable[[], HardwareInventory] | None = None,
          stream: TextIO | None = None) -> int:
    """Redraw the local GPUs every ``seconds`` until Ctrl-C (or ``iterations`` frames).

    Args:
        seconds: pause between frames, s.
        json_output: one compact JSON document per line instead of the table.
        iterations: stop after this many frames; ``None`` runs until interrupted.
        sleep: the pause function (tests pass a fake).
        snapshot: the inventory source; default :func:`planner.hardware.local.probe`.
        stream: where to draw; default ``sys.stdout``. The screen is cleared between
            frames only on a terminal.

    Returns:
        0, also after Ctrl-C.
    """
    if snapshot is None:
        from planner.hardware.local import probe

        snapshot = probe
    out = sys.stdout if stream is None else stream
    clear = not json_output and out.isatty()
    try:
        for frame in itertools.count(1):
            inventory = snapshot()
            if json_output:
                text = json.dumps(inventory.to_dict())
            else:
                stamp = time.strftime('%H:%M:%S', time.localtime(inventory.taken_at))
                text = f'{stamp}  every {seconds:g} s, Ctrl-C to stop\n{render(inventory)}'
                if not inventory.gpus:
                    text += f'\n{_CATALOG_HINT}'
                text = (_CLEAR if clear else ('' if frame == 1 else '\n')) + text
            out.write(text + '\n')
            out.flush()
            if iterations is not None and frame >= iterations:
                break
            sleep(seconds)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a watch ends
    return 0


# ----------------------------------------------------------------- text view


def _dash(value: object, fmt: str = '{}') -> str:
    return '-' if value is None else fmt.format(value)


def _memory_cell(gpu: GpuInfo) -> str:
    used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
    if used is None or not total:
        return f'-/{total / GIB:.1f}' if total else '-'
    cells = round(_BAR_CELLS * used / total)
    bar = '#' * cells + '.' * (_BAR_CELLS - cells)
    return f'{used / GIB:.1f}/{total / GIB:.1f} [{bar}]'


def _pair(a: object, b: object, fmt: str = '{}') -> str:
    return '-' if a is None and b is None else f'{_dash(a, fmt)}/{_dash(b, fmt)}'


def _pcie_cell(gpu: GpuInfo) -> str:
    now = (f'gen{gpu.pcie_generation} x{gpu.pcie_width}'
           if gpu.pcie_generation is not None and gpu.pcie_width is not None else '-')
    top = (f'gen{gpu.pcie_generation_max} x{gpu.pcie_width_max}'
           if gpu.pcie_generation_max is not None and gpu.pcie_width_max is not None else None)
    return now if top in (None, now) else f'{now} (max {top})'


def _row(gpu: GpuInfo) -> list[str]:
    name = (gpu.name or '?') + (' (lost)' if gpu.lost else '')
    nvlink = ('-' if gpu.nvlink_links is None else
              'no' if gpu.nvlink_links == 0 else f'{gpu.nvlink_active_links}/{gpu.nvlink_links}')
    procs = '-' if gpu.processes is None else str(len(gpu.processes))
    return [str(gpu.index), name, _memory_cell(gpu), _dash(gpu.utilization_gpu_percent, '{}%'),
            _dash(gpu.utilization_memory_percent, '{}%'), _dash(gpu.temperature_c, '{}C'),
            _pair(gpu.power_draw_w, gpu.power_limit_w, '{:.0f}'),
            _pair(gpu.sm_clock_mhz, gpu.sm_clock_max_mhz),
            _pair(gpu.mem_clock_mhz, gpu.mem_clock_max_mhz), _pcie_cell(gpu), nvlink,
            gpu.catalog or ('-' if gpu.lost or not gpu.name else 'unknown'), procs]


_HEADERS = ['GPU', 'name', 'memory used/total GiB', 'util', 'mem', 'temp', 'power/limit W',
            'SM/max MHz', 'mem/max MHz', 'PCIe', 'NVLink', 'catalog', 'procs']
_RIGHT = {0, 3, 4, 5, 6, 7, 8, 12}  # numeric columns


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]],
           right: Collection[int] = ()) -> list[str]:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return ['  '.join(cell.rjust(w) if i in right else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in [headers, *rows]]


def _processes(gpus: Sequence[GpuInfo]) -> list[str]:
    rows = [[str(g.index), str(p.pid), p.name or '?',
             '-' if p.used_memory_bytes is None else f'{p.used_memory_bytes / GIB:.2f} GiB']
            for g in gpus for p in (g.processes or ())]
    return ['', 'processes', *_table(['GPU', 'pid', 'name', 'memory'], rows, {0, 1, 3})] \
        if rows else []


def _topology(inventory: HardwareInventory) -> list[str]:
    from planner.hardware.local.inventory import TOPOLOGY_LEGEND

    indices = [g.index for g in inventory.gpus]
    if len(indices) < 2:
        return []
    lost = {g.index for g in inventory.gpus if g.lost}
    headers = ['', *(f'GPU{i}' for i in indices)]
    rows = []
    for a in indices:
        cells = [f'GPU{a}']
        for b in indices:
            link = inventory.link(a, b)
            cells.append('X' if a == b else 'lost' if lost & {a, b} else
                         link.label if link else '?')
        rows.append(cells)
    legend = textwrap.wrap(f'legend: {TOPOLOGY_LEGEND}', 100, subsequent_indent='  ')
    return ['', 'topology', *_table(headers, rows), *legend]


def render(inventory: HardwareInventory) -> str:
    """The inventory as text: the message, a GPU table, processes, topology, field errors."""
    if not inventory.gpus:
        return inventory.message  # one line: why there is nothing to show
    message = textwrap.fill(inventory.message, 100, break_long_words=False,
                            break_on_hyphens=False)
    lines = [message, '', *_table(_HEADERS, [_row(g) for g in inventory.gpus], _RIGHT)]
    lines += _processes(inventory.gpus)
    lines += _topology(inventory)
    notes = [f'GPU {g.index}: {"; ".join(g.errors)}' for g in inventory.gpus if g.errors]
    if notes:
        lines += ['', 'fields NVML could not give', *notes]
    return '\n'.join(lines)


# ----------------------------------------------------------------- catalog


def _print_catalog(as_json: bool) -> int:
    from planner.hardware.catalog import load_gpus, load_interconnects

    gpus, links = load_gpus(), load_interconnects()
    if as_json:
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
        print(f'{g.key:<16}{g.memory_bytes / GIB:>8.1f} GiB{bf16:>11.1f}'
              f'{g.hbm_bandwidth_bytes_per_s / 1e12:>10.2f}  {g.intra_node_link:<26}{g.name}')
    print()
    print(f'{"interconnect":<16}{"GB/s per GPU":>14}  name')
    for li in links.values():
        print(f'{li.key:<16}{li.bandwidth_bytes_per_s / 1e9:>14.1f}  {li.name}')
    return 0
