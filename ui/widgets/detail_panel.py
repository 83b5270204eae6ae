"""Everything about the selected plan: layout, memory, time, cost, guidance, warnings.

A ``QTreeWidget`` of (quantity, value) rows in sections; every estimate carries its
formula as a tooltip. Warnings and guidance come from :mod:`planner.guidance`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QLabel, QTreeWidget, QTreeWidgetItem, QWidget

from planner.report import COMPONENT_LABELS, OVERHEAD_LABELS

if TYPE_CHECKING:
    from planner.guidance import Guidance
    from planner.plan_request import PlanRequest
    from planner.plan_result import Candidate

GIB = 2**30
DAY = 86_400.0

FORMULAS = {
    'weights': 'parameters on this GPU × bytes per weight (÷ DP·CP under ZeRO-3); the '
               'parameters of one stage are (layers ÷ PP) layers ÷ TP, plus the embedding or '
               'head on the first/last stage',
    'gradients': 'parameters on this GPU × gradient bytes (÷ DP·CP under ZeRO-2/3); live '
                 'during forward only when accumulating',
    'optimizer_states': 'parameters × (optimizer state bytes + fp32 master copy) '
                        '(÷ DP·CP under ZeRO-1/2/3)',
    'optimizer_step_temp': 'the optimizer step\'s temporaries (foreach buffers)',
    'activations': 'saved bytes per layer (recompute mode, TP/SP and CP splits) × layers '
                   'on the stage × micro-batches in flight (min(accum, PP) under 1F1B)',
    'logits': 'b·s·vocab logits and the loss\'s buffers on the last stage',
    'attention_scores_temp': 'eager attention: 2 × 4 bytes × b × heads/TP × s × s/CP',
    'autocast_copies': 'low-precision copies autocast keeps of each weight a saved matmul '
                       'reads',
    'backward_temp': 'gradients alive while one layer runs backward (residual + MLP width)',
    'zero3_gathered': 'ZeRO-3: whole layers gathered for compute (current + prefetched)',
    'unsharded_grad': 'ZeRO-2/3: a layer\'s full gradient before reduce-scatter',
    'buffers': 'DDP/ZeRO communication buckets',
    'cuda_context': 'CUDA driver context and loaded kernels (outside the allocator)',
    'workspace': 'cuBLAS workspace + NCCL buffers when more than one GPU',
    'allocator_reserve': 'caching-allocator reserve: 5 % of the tensor peak',
}
TIME_FORMULAS = {
    'step': 'step = compute + memory-bound ops + pipeline bubble + exposed TP/CP/PP/DP '
            'communication + optimizer + overhead (docs/time-model.md)',
    'tokens': 'tokens/s = global batch × sequence length ÷ step time',
    'mfu': 'MFU = 6·N·tokens/s (+ attention FLOPs) ÷ (GPUs × peak FLOP/s)',
    'hfu': 'HFU counts recomputed FLOPs too',
    'efficiency': 'GEMM efficiency: achieved ÷ peak FLOP/s for this GEMM size (default '
                  'curve per GPU family, or a calibration)',
    'steps': 'steps = training tokens ÷ (global batch × sequence length)',
    'time': 'time-to-train = steps × step time',
    'gpu_hours': 'GPU-hours = GPUs × time-to-train ÷ 3600',
    'cost': 'cost = GPU-hours × price per GPU-hour',
}


def _tr(text: str) -> str:
    return QCoreApplication.translate('DetailPanel', text)


def gib(n: float) -> str:
    """Bytes as GiB."""
    return f'{n / GIB:,.2f} GiB'


class DetailPanel(QTreeWidget):
    """The selected candidate's numbers in sections, formulas as tooltips."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setColumnCount(2)
        self.setHeaderLabels([_tr('quantity'), _tr('value')])
        self.setAlternatingRowColors(True)
        self.setRootIsDecorated(True)
        self.setWordWrap(True)
        self.header().setStretchLastSection(True)
        self.setColumnWidth(0, 230)
        self.values: dict[str, str] = {}
        self.warnings_label = QLabel()
        self.warnings_label.setObjectName('warnings_label')
        self.warnings_label.setWordWrap(True)
        self.warnings_label.setStyleSheet('color: #c62828;')
        self.show_message(_tr('Select a plan in the table.'))

    def show_message(self, text: str) -> None:
        """One line instead of a plan (no result yet, or no plan)."""
        self.clear()
        self.values = {}
        self.warnings_label.setText('')
        item = QTreeWidgetItem([text, ''])
        item.setFirstColumnSpanned(True)
        self.addTopLevelItem(item)

    def _section(self, title: str) -> QTreeWidgetItem:
        item = QTreeWidgetItem([title, ''])
        font = QFont(item.font(0))
        font.setBold(True)
        item.setFont(0, font)
        self.addTopLevelItem(item)
        item.setExpanded(True)
        return item

    def _row(self, parent: QTreeWidgetItem, key: str, label: str, value: str,
             tip: str = '', colour: QColor | None = None) -> None:
        item = QTreeWidgetItem([label, value])
        item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if tip:
            item.setToolTip(0, tip)
            item.setToolTip(1, tip)
        if colour is not None:
            item.setForeground(1, QBrush(colour))
        parent.addChild(item)
        self.values[key] = value

    def show_candidate(self, request: PlanRequest, c: Candidate,
                       guidance: Guidance | None) -> None:
        """Fill every section for candidate ``c``."""
        self.clear()
        self.values = {}
        self.warnings_label.setText('')
        m = c.memory
        s = self._section(_tr('Layout #{rank}').format(rank=c.rank))
        self._row(s, 'gpus', _tr('GPUs'), f'{c.gpus} = {c.nodes} node(s) × {c.gpus_per_node}',
                  _tr('GPUs = TP × PP × CP × DP'))
        self._row(s, 'layout', _tr('TP / PP / CP / DP'), c.layout,
                  _tr('tensor / pipeline (× virtual) / context / data parallel sizes'))
        self._row(s, 'batch', _tr('micro-batch × accumulation × DP'),
                  f'{c.micro_batch} × {c.grad_accum} × {c.dp} = {c.global_batch}',
                  _tr('global batch = micro-batch × accumulation × data-parallel size'))
        self._row(s, 'zero', _tr('ZeRO stage'), str(c.zero))
        self._row(s, 'recompute', _tr('recompute'), c.recompute)
        self._row(s, 'sp', _tr('sequence parallel'), _tr('yes') if c.sequence_parallel else
                  _tr('no'))

        s = self._section(_tr('Memory per GPU (peak at {phase})').format(
            phase=m.peak_phase.replace('_', ' ')))
        for key, label in COMPONENT_LABELS.items():
            value = m.components.get(key, 0)
            if value:
                self._row(s, f'mem.{key}', label, gib(value), FORMULAS.get(key, ''))
        self._row(s, 'mem.tensor_peak', _tr('tensor peak'), gib(m.tensor_peak_bytes),
                  _tr('the largest phase total of live tensors ≈ '
                      'torch.cuda.max_memory_allocated()'))
        for key, label in OVERHEAD_LABELS.items():
            self._row(s, f'mem.{key}', label, gib(m.overhead.get(key, 0)), FORMULAS.get(key, ''))
        colour = QColor('#2e7d32') if m.headroom_bytes >= 0.1 * m.usable_bytes else QColor(
            '#ef6c00')
        self._row(s, 'mem.total', _tr('total'), gib(m.total_bytes),
                  _tr('tensor peak + CUDA context + workspaces + allocator reserve ≈ nvidia-smi'))
        self._row(s, 'mem.usable', _tr('usable'), gib(m.usable_bytes),
                  _tr('capacity × (1 − margin {margin:.0%})').format(margin=m.margin_fraction))
        self._row(s, 'mem.headroom', _tr('headroom'), gib(m.headroom_bytes),
                  _tr('usable − total'), colour)
        for phase, value in m.phases.items():
            self._row(s, f'phase.{phase}', _tr('phase: {p}').format(p=phase.replace('_', ' ')),
                      gib(value), _tr('total of live tensors at this moment of a step'))

        s = self._section(_tr('Time and cost'))
        self._row(s, 'step', _tr('step time'), f'{c.step_time_s:.3g} s', TIME_FORMULAS['step'])
        for key, value in sorted(c.step_breakdown_s.items(), key=lambda kv: -kv[1]):
            if value > 0:
                self._row(s, f'step.{key}', '  ' + key.removesuffix('_s').replace('_', ' '),
                          f'{value:.3g} s ({value / c.step_time_s:.0%})', TIME_FORMULAS['step'])
        self._row(s, 'tokens', _tr('throughput'), f'{c.tokens_per_s:,.0f} tokens/s',
                  TIME_FORMULAS['tokens'])
        self._row(s, 'mfu', _tr('MFU'), f'{c.mfu:.1%}', TIME_FORMULAS['mfu'])
        self._row(s, 'hfu', _tr('HFU'), f'{c.hfu:.1%}', TIME_FORMULAS['hfu'])
        self._row(s, 'efficiency', _tr('GEMM efficiency'), f'{c.efficiency:.0%}',
                  TIME_FORMULAS['efficiency'])
        if math.isfinite(c.time_to_train_s):
            self._row(s, 'steps', _tr('steps'), f'{c.steps:,.0f}', TIME_FORMULAS['steps'])
            self._row(s, 'time', _tr('time-to-train'), f'{c.time_to_train_s / DAY:,.2f} days',
                      TIME_FORMULAS['time'])
            self._row(s, 'gpu_hours', _tr('GPU-hours'), f'{c.gpu_hours:,.0f}',
                      TIME_FORMULAS['gpu_hours'])
            self._row(s, 'cost', _tr('cost'),
                      f'${c.cost_usd:,.0f} at ${request.price:.2f}/GPU-hour',
                      TIME_FORMULAS['cost'])

        if guidance is None:
            return
        g = guidance
        s = self._section(_tr('Batch and learning-rate guidance'))
        self._row(s, 'g.batch', _tr('global batch'),
                  f'{g.global_batch_samples:,} seq = {g.global_batch_tokens / 1e6:,.2f}M tokens')
        if g.critical_batch_tokens is not None:
            self._row(s, 'g.critical', _tr('critical batch'),
                      f'{g.critical_batch_tokens / 1e6:,.2f}M tokens',
                      _tr('B_crit ≈ B_noise (McCandlish et al. 2018): {src}').format(
                          src=g.critical_batch_source))
        if g.steps_factor is not None:
            self._row(s, 'g.steps_factor', _tr('steps vs minimum'), f'{g.steps_factor:.2f}×',
                      _tr('S(B)/S_min = 1 + B_noise/B'))
            self._row(s, 'g.data_factor', _tr('data vs minimum'), f'{g.data_factor:.2f}×',
                      _tr('E(B)/E_min = 1 + B/B_noise'))
        if g.learning_rates is not None:
            r = g.learning_rates
            self._row(s, 'g.lr', _tr('learning rate'), f'{r.recommended:.3g}',
                      _tr('{rule}; linear {lin:.3g}, square-root {sq:.3g}').format(
                          rule=r.rule, lin=r.linear, sq=r.square_root))
        elif g.deepseek_lr is not None:
            self._row(s, 'g.lr', _tr('learning rate (DeepSeek law)'), f'{g.deepseek_lr:.3g}',
                      _tr('eta_opt = 0.3118 · C^-0.125 (DeepSeek LLM 2024)'))
        if g.warmup_steps is not None:
            self._row(s, 'g.warmup', _tr('warmup'), f'{g.warmup_steps:,} steps', g.warmup_note)
        for i, note in enumerate(g.notes):
            self._row(s, f'g.note{i}', _tr('note'), note, note)
        if g.warnings:
            s = self._section(_tr('Warnings'))
            for i, text in enumerate(g.warnings):
                item = QTreeWidgetItem([text, ''])
                item.setFirstColumnSpanned(True)
                item.setSizeHint(0, item.sizeHint(0))
                item.setToolTip(0, text)
                item.setForeground(0, QBrush(QColor('#c62828')))
                s.addChild(item)
                self.values[f'warning{i}'] = text
            self.warnings_label.setText('\n'.join(f'⚠ {w}' for w in g.warnings))


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    from ui.plan_compute import compute_plan, guidance_for
    from ui.plan_inputs import PlanInputs

    app = QApplication([])
    o = compute_plan(PlanInputs())
    w = DetailPanel()
    w.show_candidate(o.request, o.candidates[0], guidance_for(o, o.candidates[0]))
    w.resize(500, 700)
    w.show()
    app.exec()
