"""Everything about the selected plan: layout, memory, time, cost, guidance, warnings.

A ``QTreeWidget`` of (quantity, value) rows in sections; every estimate carries its
formula as a tooltip. Warnings and guidance come from :mod:`planner.plans.guidance`; their
sentences, the memory part labels and the phase names are the core's English texts,
shown through :func:`ui.core_terms.core_text`.

A plan is first described as sections of :class:`_Line` rows, then drawn: when the
sections and row keys are those already shown (another row of the same table, or the
same layout after an edit), the items are updated in place; rebuilding the tree costs
about three times as much (spanned titles re-lay the view).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QLabel, QTreeWidget, QTreeWidgetItem, QWidget

from planner.memory.report import COMPONENT_LABELS, OVERHEAD_LABELS
from planner.stacks import STACKS
from planner.units import DAY, gib
from ui.core_terms import core_text
from ui.i18n import QT_TRANSLATE_NOOP, translate

if TYPE_CHECKING:
    from planner.plans.guidance import Guidance
    from planner.plans.request import PlanRequest
    from planner.plans.result import Candidate

LABEL_WIDTH = (100, 230)  # the label column's range in pixels; the values get the rest

# Tooltips, translated when shown (DetailPanel._row).
FORMULAS = {
    'weights': QT_TRANSLATE_NOOP(
        'DetailPanel', 'parameters on this GPU × bytes per weight (÷ DP·CP under ZeRO-3); the '
        'parameters of one stage are (layers ÷ PP) layers ÷ TP, plus the embedding or head on '
        'the first/last stage'),
    'gradients': QT_TRANSLATE_NOOP(
        'DetailPanel', 'parameters on this GPU × gradient bytes (÷ DP·CP under ZeRO-2/3); live '
        'during forward only when accumulating'),
    'optimizer_states': QT_TRANSLATE_NOOP(
        'DetailPanel', 'parameters × (optimizer state bytes + fp32 master copy) (÷ DP·CP under '
        'ZeRO-1/2/3)'),
    'optimizer_step_temp': QT_TRANSLATE_NOOP(
        'DetailPanel', "the optimizer step's temporaries (foreach buffers)"),
    'activations': QT_TRANSLATE_NOOP(
        'DetailPanel', 'saved bytes per layer (recompute mode, TP/SP and CP splits) × layers on '
        'the stage × micro-batches in flight (min(accum, PP) under 1F1B)'),
    'logits': QT_TRANSLATE_NOOP(
        'DetailPanel', "b·s·vocab logits and the loss's buffers on the last stage"),
    'attention_scores_temp': QT_TRANSLATE_NOOP(
        'DetailPanel', 'eager attention: 2 × 4 bytes × b × heads/TP × s × s/CP'),
    'autocast_copies': QT_TRANSLATE_NOOP(
        'DetailPanel', 'low-precision copies autocast keeps of each weight a saved matmul '
        'reads'),
    'backward_temp': QT_TRANSLATE_NOOP(
        'DetailPanel', 'gradients alive while one layer runs backward (residual + MLP width)'),
    'zero3_gathered': QT_TRANSLATE_NOOP(
        'DetailPanel', 'ZeRO-3: whole layers gathered for compute (current + prefetched)'),
    'unsharded_grad': QT_TRANSLATE_NOOP(
        'DetailPanel', "ZeRO-2/3: a layer's full gradient before reduce-scatter"),
    'buffers': QT_TRANSLATE_NOOP('DetailPanel', 'DDP/ZeRO communication buckets'),
    'cuda_context': QT_TRANSLATE_NOOP(
        'DetailPanel', 'CUDA driver context and loaded kernels (outside the allocator)'),
    'workspace': QT_TRANSLATE_NOOP(
        'DetailPanel', 'cuBLAS workspace + NCCL buffers when more than one GPU'),
    'allocator_reserve': QT_TRANSLATE_NOOP(
        'DetailPanel', 'caching-allocator reserve: 5 % of the tensor peak'),
}
TIME_FORMULAS = {
    'step': QT_TRANSLATE_NOOP(
        'DetailPanel', 'step = compute + memory-bound ops + pipeline bubble + exposed '
        'TP/CP/PP/DP communication + optimizer + overhead (docs/time-model.md)'),
    'tokens': QT_TRANSLATE_NOOP(
        'DetailPanel', 'tokens/s = global batch × sequence length ÷ step time'),
    'mfu': QT_TRANSLATE_NOOP(
        'DetailPanel', 'MFU = 6·N·tokens/s (+ attention FLOPs) ÷ (GPUs × peak FLOP/s)'),
    'hfu': QT_TRANSLATE_NOOP('DetailPanel', 'HFU counts recomputed FLOPs too'),
    'efficiency': QT_TRANSLATE_NOOP(
        'DetailPanel', 'GEMM efficiency: achieved ÷ peak FLOP/s for this GEMM size (default '
        'curve per GPU family, or a calibration)'),
    'steps': QT_TRANSLATE_NOOP(
        'DetailPanel', 'steps = training tokens ÷ (global batch × sequence length)'),
    'time': QT_TRANSLATE_NOOP('DetailPanel', 'time-to-train = steps × step time'),
    'gpu_hours': QT_TRANSLATE_NOOP('DetailPanel', 'GPU-hours = GPUs × time-to-train ÷ 3600'),
    'cost': QT_TRANSLATE_NOOP('DetailPanel', 'cost = GPU-hours × price per GPU-hour'),
}


@dataclass(frozen=True)
class _Line:
    """One row: a quantity and its value, or a line across both columns (``spanned``)."""

    key: str
    label: str
    value: str = ''
    tip: str = ''
    colour: QColor | None = None  # of the value; of the label when spanned
    spanned: bool = False


@dataclass
class _Section:
    title: str
    lines: list[_Line]


def _formula(key: str) -> str:
    return translate('DetailPanel', FORMULAS[key]) if key in FORMULAS else ''


def _time_formula(key: str) -> str:
    return translate('DetailPanel', TIME_FORMULAS[key])


def _words(key: str) -> str:
    """A core key shown as words ('forward_end' -> 'forward end'), translated."""
    return core_text(key.removesuffix('_s').replace('_', ' '))


class DetailPanel(QTreeWidget):
    """The selected candidate's numbers in sections, formulas as tooltips."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setColumnCount(2)
        self.setHeaderLabels([translate('DetailPanel', 'quantity'),
                              translate('DetailPanel', 'value')])
        self.setAlternatingRowColors(True)
        self.setRootIsDecorated(True)
        self.setWordWrap(True)
        self.header().setStretchLastSection(True)
        self.setColumnWidth(0, LABEL_WIDTH[1])
        self._label_width_fitted = False
        self._shape: tuple | None = None  # the sections and row keys on screen
        self._sections: list[_Section] = []
        self.values: dict[str, str] = {}
        self.warnings_label = QLabel()
        self.warnings_label.setObjectName('warnings_label')
        self.warnings_label.setWordWrap(True)
        self.warnings_label.setStyleSheet('color: #c62828;')
        self.show_message(translate('DetailPanel', 'Select a plan in the table.'))

    def show_message(self, text: str) -> None:
        """One line instead of a plan (no result yet, or no plan)."""
        self.clear()
        self._shape = None
        self.values = {}
        self.warnings_label.setText('')
        item = QTreeWidgetItem([text, ''])
        self.addTopLevelItem(item)
        item.setFirstColumnSpanned(True)  # only once in the tree (a no-op before)

    def _section(self, title: str) -> _Section:
        section = _Section(title, [])
        self._sections.append(section)
        return section

    def _row(self, section: _Section, key: str, label: str, value: str, tip: str = '',
             colour: QColor | None = None) -> None:
        section.lines.append(_Line(key, label, value, tip, colour))

    def show_candidate(self, request: PlanRequest, c: Candidate,
                       guidance: Guidance | None) -> None:
        """Fill every section for candidate ``c``."""
        self._sections = []
        self._layout_section(c)
        if request.lora is not None:
            self._tuning_row(request)
        self._memory_section(c)
        self._time_section(request, c)
        warnings: list[str] = []
        if guidance is not None:
            warnings = self._guidance_section(guidance)
        self._draw(self._sections)
        self.warnings_label.setText('\n'.join(f'⚠ {w}' for w in warnings))
        if not self._label_width_fitted:  # once: later the user's own width stays
            self._fit_label_column()
            self._label_width_fitted = True

    def _draw(self, sections: list[_Section]) -> None:
        """Show ``sections``: in place when their shape is the one on screen."""
        shape = tuple((len(s.lines), tuple(line.key for line in s.lines)) for s in sections)
        self.values = {line.key: line.label if line.spanned else line.value
                       for s in sections for line in s.lines}
        if shape == self._shape:
            for i, section in enumerate(sections):
                item = self.topLevelItem(i)
                assert item is not None  # the shape on screen has this many sections
                _set_text(item, 0, section.title)
                for j, line in enumerate(section.lines):
                    child = item.child(j)
                    assert child is not None
                    self._fill(child, line)
            return
        self.clear()
        self._shape = shape
        bold = QFont(self.font())
        bold.setBold(True)
        for section in sections:
            item = QTreeWidgetItem([section.title, ''])
            item.setFont(0, bold)
            self.addTopLevelItem(item)
            item.setFirstColumnSpanned(True)  # a title never squeezes into the label column
            item.setExpanded(True)
            for line in section.lines:
                row = QTreeWidgetItem()
                if not line.spanned:
                    row.setTextAlignment(1, Qt.AlignmentFlag.AlignRight
                                         | Qt.AlignmentFlag.AlignVCenter)
                item.addChild(row)
                self._fill(row, line)
                if line.spanned:
                    row.setFirstColumnSpanned(True)

    @staticmethod
    def _fill(item: QTreeWidgetItem, line: _Line) -> None:
        """Texts, tooltips and colour of one row (only what changed is set)."""
        _set_text(item, 0, line.label)
        _set_text(item, 1, line.value)
        if item.toolTip(0) != line.tip:
            item.setToolTip(0, line.tip)
            item.setToolTip(1, line.tip)
        column = 0 if line.spanned else 1
        brush = QBrush(line.colour) if line.colour is not None else QBrush()
        if item.foreground(column) != brush:
            item.setForeground(column, brush)

    def _fit_label_column(self) -> None:
        """Narrow the label column to its widest row label (within LABEL_WIDTH).

        Chinese labels are much shorter than English ones; the values (costs, batch
        sizes in words) then get the room instead of being elided.
        """
        metrics = self.fontMetrics()
        widest = 0
        for i in range(self.topLevelItemCount()):
            section = self.topLevelItem(i)
            for j in range(section.childCount() if section is not None else 0):
                row = section.child(j) if section is not None else None
                if row is not None and not row.isFirstColumnSpanned():
                    widest = max(widest, metrics.horizontalAdvance(row.text(0)))
        low, high = LABEL_WIDTH
        # rows sit two indentations in (root decoration + section); 16 px of margins
        self.setColumnWidth(0, max(low, min(high, widest + 2 * self.indentation() + 16)))

    def _layout_section(self, c: Candidate) -> None:
        s = self._section(translate('DetailPanel', 'Layout #{rank}').format(rank=c.rank))
        stack = STACKS[c.framework]
        self._row(s, 'stack', translate('DetailPanel', 'stack'),
                  f'{core_text(stack.label)} ({c.framework}) · {c.precision}',
                  core_text(stack.description))
        self._row(s, 'gpus', translate('DetailPanel', 'GPUs'),
                  translate('DetailPanel', '{gpus} = {nodes} node(s) × {per_node}').format(
                      gpus=c.gpus, nodes=c.nodes, per_node=c.gpus_per_node),
                  translate('DetailPanel', 'GPUs = TP × PP × CP × DP'))
        self._row(s, 'layout', translate('DetailPanel', 'TP / PP / CP / DP'), c.layout,
                  translate('DetailPanel',
                            'tensor / pipeline (× virtual) / context / data parallel sizes'))
        self._row(s, 'batch', translate('DetailPanel', 'micro-batch × accumulation × DP'),
                  f'{c.micro_batch} × {c.grad_accum} × {c.dp} = {c.global_batch}',
                  translate('DetailPanel',
                            'global batch = micro-batch × accumulation × data-parallel size'))
        self._row(s, 'zero', translate('DetailPanel', 'ZeRO stage'), str(c.zero))
        self._row(s, 'recompute', translate('DetailPanel', 'recompute'), core_text(c.recompute))
        self._row(s, 'sp', translate('DetailPanel', 'sequence parallel'),
                  translate('DetailPanel', 'yes') if c.sequence_parallel
                  else translate('DetailPanel', 'no'))

    def _tuning_row(self, request: PlanRequest) -> None:
        """What a LoRA/QLoRA plan trains, under the layout (its section is the last one)."""
        from planner.memory.model_states import lora_params

        lora, model = request.lora, request.model
        if lora is None:
            return
        trainable = lora_params(model, lora)
        kind = 'QLoRA' if lora.quantized else 'LoRA'
        self._row(self._sections[-1], 'tuning', translate('DetailPanel', 'fine-tuning'),
                  translate('DetailPanel', '{kind} r={rank} on {targets}: {params:.1f}M '
                            'trainable ({share:.2%})').format(
                      kind=kind, rank=lora.rank, targets=', '.join(lora.targets),
                      params=trainable / 1e6, share=trainable / model.total_params()),
                  translate('DetailPanel', 'adapters train on a frozen base (4-bit NF4 for '
                            'QLoRA); data parallel only, as PEFT runs'))

    def _memory_section(self, c: Candidate) -> None:
        m = c.memory
        s = self._section(translate('DetailPanel', 'Memory per GPU (peak at {phase})').format(
            phase=_words(m.peak_phase)))
        for key, label in COMPONENT_LABELS.items():
            value = m.components.get(key, 0)
            if value:
                self._row(s, f'mem.{key}', core_text(label), gib(value), _formula(key))
        self._row(s, 'mem.tensor_peak', translate('DetailPanel', 'tensor peak'),
                  gib(m.tensor_peak_bytes),
                  translate('DetailPanel', 'the largest phase total of live tensors ≈ '
                            'torch.cuda.max_memory_allocated()'))
        for key, label in OVERHEAD_LABELS.items():
            self._row(s, f'mem.{key}', core_text(label), gib(m.overhead.get(key, 0)),
                      _formula(key))
        colour = QColor('#2e7d32') if m.headroom_bytes >= 0.1 * m.usable_bytes else QColor(
            '#ef6c00')
        self._row(s, 'mem.total', translate('DetailPanel', 'total'), gib(m.total_bytes),
                  translate('DetailPanel', 'tensor peak + CUDA context + workspaces + allocator '
                            'reserve ≈ nvidia-smi'))
        self._row(s, 'mem.usable', translate('DetailPanel', 'usable'), gib(m.usable_bytes),
                  translate('DetailPanel', 'capacity × (1 − margin {margin:.0%})').format(
                      margin=m.margin_fraction))
        self._row(s, 'mem.headroom', translate('DetailPanel', 'headroom'),
                  gib(m.headroom_bytes), translate('DetailPanel', 'usable − total'), colour)
        for phase, value in m.phases.items():
            self._row(s, f'phase.{phase}',
                      translate('DetailPanel', 'phase: {p}').format(p=_words(phase)), gib(value),
                      translate('DetailPanel', 'total of live tensors at this moment of a step'))

    def _time_section(self, request: PlanRequest, c: Candidate) -> None:
        s = self._section(translate('DetailPanel', 'Time and cost'))
        step_tip = _time_formula('step')
        self._row(s, 'step', translate('DetailPanel', 'step time'), f'{c.step_time_s:.3g} s',
                  step_tip)
        for key, value in sorted(c.step_breakdown_s.items(), key=lambda kv: -kv[1]):
            if value > 0:
                self._row(s, f'step.{key}', '  ' + _words(key),
                          f'{value:.3g} s ({value / c.step_time_s:.0%})', step_tip)
            if key == 'elementwise_s' and c.dequant_s > 0:
                self._row(s, 'step.dequant', '    ' + translate(
                    'DetailPanel', 'of which QLoRA dequantization'),
                    f'{c.dequant_s:.3g} s ({c.dequant_s / c.step_time_s:.0%})', translate(
                        'DetailPanel', 'bitsandbytes turns each 4-bit weight back into 16 '
                        'bits before every matmul that uses it'))
        self._row(s, 'tokens', translate('DetailPanel', 'throughput'),
                  f'{c.tokens_per_s:,.0f} tokens/s', _time_formula('tokens'))
        self._row(s, 'mfu', translate('DetailPanel', 'MFU'), f'{c.mfu:.1%}', _time_formula('mfu'))
        self._row(s, 'hfu', translate('DetailPanel', 'HFU'), f'{c.hfu:.1%}', _time_formula('hfu'))
        self._row(s, 'efficiency', translate('DetailPanel', 'GEMM efficiency'),
                  f'{c.efficiency:.0%}', _time_formula('efficiency'))
        if not math.isfinite(c.time_to_train_s):
            return
        self._row(s, 'steps', translate('DetailPanel', 'steps'), f'{c.steps:,.0f}',
                  _time_formula('steps'))
        self._row(s, 'time', translate('DetailPanel', 'time-to-train'),
                  translate('DetailPanel', '{days:,.2f} days').format(
                      days=c.time_to_train_s / DAY), _time_formula('time'))
        self._row(s, 'gpu_hours', translate('DetailPanel', 'GPU-hours'), f'{c.gpu_hours:,.0f}',
                  _time_formula('gpu_hours'))
        self._row(s, 'cost', translate('DetailPanel', 'cost'),
                  translate('DetailPanel', '${cost:,.0f} at ${price:.2f}/GPU-hour').format(
                      cost=c.cost_usd, price=request.price), _time_formula('cost'))

    def _guidance_section(self, g: Guidance) -> list[str]:
        """The guidance rows; returns the warnings (their own section, last)."""
        s = self._section(translate('DetailPanel', 'Batch and learning-rate guidance'))
        self._row(s, 'g.batch', translate('DetailPanel', 'global batch'),
                  translate('DetailPanel', '{seqs:,} seq = {tokens:,.2f}M tokens').format(
                      seqs=g.global_batch_samples, tokens=g.global_batch_tokens / 1e6))
        if g.critical_batch_tokens is not None:
            self._row(s, 'g.critical', translate('DetailPanel', 'critical batch'),
                      translate('DetailPanel', '{tokens:,.2f}M tokens').format(
                          tokens=g.critical_batch_tokens / 1e6),
                      translate('DetailPanel', 'B_crit ≈ B_noise (McCandlish et al. 2018): '
                                '{src}').format(src=core_text(g.critical_batch_source)))
        if g.steps_factor is not None:
            self._row(s, 'g.steps_factor', translate('DetailPanel', 'steps vs minimum'),
                      f'{g.steps_factor:.2f}×', translate('DetailPanel',
                                                          'S(B)/S_min = 1 + B_noise/B'))
            self._row(s, 'g.data_factor', translate('DetailPanel', 'data vs minimum'),
                      f'{g.data_factor:.2f}×', translate('DetailPanel',
                                                         'E(B)/E_min = 1 + B/B_noise'))
        if g.learning_rates is not None:
            r = g.learning_rates
            self._row(s, 'g.lr', translate('DetailPanel', 'learning rate'), f'{r.recommended:.3g}',
                      translate('DetailPanel', '{rule}; linear {lin:.3g}, square-root '
                                '{sq:.3g}').format(rule=core_text(r.rule), lin=r.linear,
                                                   sq=r.square_root))
        elif g.deepseek_lr is not None:
            self._row(s, 'g.lr', translate('DetailPanel', 'learning rate (DeepSeek law)'),
                      f'{g.deepseek_lr:.3g}',
                      translate('DetailPanel', 'eta_opt = 0.3118 · C^-0.125 (DeepSeek LLM 2024)'))
        if g.warmup_steps is not None:
            self._row(s, 'g.warmup', translate('DetailPanel', 'warmup'),
                      translate('DetailPanel', '{steps:,} steps').format(steps=g.warmup_steps),
                      core_text(g.warmup_note))
        for i, note in enumerate(g.notes):
            text = core_text(note)
            self._row(s, f'g.note{i}', translate('DetailPanel', 'note'), text, text)
        texts = [core_text(w) for w in g.warnings]
        if texts:
            s = self._section(translate('DetailPanel', 'Warnings'))
            s.lines.extend(_Line(f'warning{i}', text, tip=text, colour=QColor('#c62828'),
                                 spanned=True) for i, text in enumerate(texts))
        return texts


def _set_text(item: QTreeWidgetItem, column: int, text: str) -> None:
    if item.text(column) != text:
        item.setText(column, text)
