"""The inputs of a plan, grouped: model, batch, training length, hardware, options.

:class:`InputPanel` reads its widgets into a :class:`ui.plan_inputs.PlanInputs`
(:meth:`InputPanel.read_inputs`) and writes one back (:meth:`InputPanel.set_inputs`).
A value that cannot be parsed, or one the core rejects (an
:class:`~planner.errors.InputError` naming ``--seq-len``...), turns its field red with
the reason as tooltip and in the line under the group (:meth:`InputPanel.show_errors`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QCompleter,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from planner import limits
from planner.defaults import RECOMPUTE_MODES, ZERO_STAGES
from planner.errors import InputError
from planner.memory.recipes import OPTIMIZERS, RECIPES
from planner.stacks import STACKS
from ui.core_terms import core_text
from ui.i18n import QT_TRANSLATE_NOOP, translate
from ui.plan_inputs import PlanInputs
from ui.widgets.count_edit import CountEdit
from ui.widgets.field_check import (
    WARNING_STYLE,
    FieldError,
    error_of,
    format_count,
    mark_error,
    parse_field,
    reason,
)

if TYPE_CHECKING:
    from planner.hardware.local import HardwareInventory

# Field tooltips, translated when shown (InputPanel._add_row).
TIPS = {
    'switches': QT_TRANSLATE_NOOP(
        'InputPanel', "The stacks' own switches, off by default as in the stacks: torchtitan's "
        'per-block torch.compile (fuses the work between the GEMMs) and async TP (hides the '
        'TP collectives behind the GEMMs; needs compile); Megatron\'s --overlap-grad-reduce '
        '(the gradient reduce-scatter behind the backward); DeepSpeed\'s partition '
        'activations (recomputed layers keep their input split over the TP ranks); '
        'torchtitan\'s zero-bubble pipeline schedule (weight gradients fill the bubble where '
        'a rank runs 2+ stages; not with compile); Megatron\'s --tp-comm-overlap (Transformer '
        'Engine hides part of the TP collectives behind the GEMMs; needs TP > 1 with sequence '
        'parallelism) and --grad-reduce-in-bf16 (a bf16 gradient buffer: 2 bytes a parameter '
        'instead of 4). Float8 is the fp8 precision.'),
    'framework': QT_TRANSLATE_NOOP(
        'InputPanel', 'The software that runs the job: its layouts, ZeRO stages, recompute, '
        'precision, kernels and launchers. "any" ranks every stack that can run the model.'),
    'model': QT_TRANSLATE_NOOP(
        'InputPanel', 'A preset (type to search: llama-3.1-8b, qwen2.5-7b...), a size such as '
        '7B (a Llama-style shape), or a Hugging Face config.json (Browse, or drop it on the '
        'window).'),
    'seq_len': QT_TRANSLATE_NOOP('InputPanel', 'Tokens per training sequence.'),
    'batch': QT_TRANSLATE_NOOP(
        'InputPanel', 'Target global batch per optimizer step = micro-batch × accumulation × '
        'data-parallel size. In sequences, or in tokens (must be a multiple of the sequence '
        'length); changing the unit converts the number. Suffixes as in the CLI: k, M, G '
        '(or B), T are powers of ten; Ki, Mi, Gi, Ti powers of two (4Mi = 4,194,304).'),
    'length': QT_TRANSLATE_NOOP(
        'InputPanel', 'How much data the run sees: a token budget (e.g. 1T) or a data set of N '
        'sequences × epochs. Sets the number of steps and so time-to-train.'),
    'gpu': QT_TRANSLATE_NOOP(
        'InputPanel', "The accelerator: this machine's GPUs first (when NVML finds them), then "
        'the catalog (memory, peak FLOP/s, bandwidths, price).'),
    'nodes': QT_TRANSLATE_NOOP('InputPanel', 'Nodes available; the plan may use fewer.'),
    'gpus_per_node': QT_TRANSLATE_NOOP(
        'InputPanel', 'GPUs in each node; tensor parallelism stays inside a node.'),
    'inter_node': QT_TRANSLATE_NOOP(
        'InputPanel', 'Network between nodes (InfiniBand, RoCE, EFA...). Default: by GPU '
        'family (NDR for Hopper).'),
    'precision': QT_TRANSLATE_NOOP(
        'InputPanel', 'Precision recipe: amp-bf16 = fp32 master weights with bf16 autocast; '
        'bf16-mixed keeps bf16 weights with an fp32 master copy; fp8 ...'),
    'optimizer': QT_TRANSLATE_NOOP(
        'InputPanel', 'Optimizer: its states per parameter (AdamW 2 × fp32, 8-bit AdamW 2 × '
        '1 byte, SGD-momentum 1, Adafactor factored).'),
    'tuning': QT_TRANSLATE_NOOP(
        'InputPanel', 'Full training updates every weight. LoRA trains small rank-r adapters '
        'on a frozen 16-bit base; QLoRA on a 4-bit NF4 base (bitsandbytes). Both run data '
        'parallel with ZeRO/FSDP, as PEFT does: no TP, PP or CP.'),
    'lora_rank': QT_TRANSLATE_NOOP('InputPanel', 'Adapter rank r (LoRA/QLoRA).'),
    'loop': QT_TRANSLATE_NOOP(
        'InputPanel', 'Training loop: accelerate and plain PyTorch loops keep the model output '
        '(b × s × vocabulary logits) through backward and the optimizer step; the Hugging '
        'Face Trainer and TRL free it inside compute_loss.'),
    'loss': QT_TRANSLATE_NOOP(
        'InputPanel', "Loss implementation: the stack's own; HF cross-entropy (fp32 copy of "
        "the logits: Hugging Face stacks, torchtitan); chunked (Liger's fused linear "
        'cross-entropy, no full logits: Hugging Face stacks, on the model types Liger '
        "patches); Megatron's vocab-parallel (Megatron, DeepSpeed pipeline). Only the stacks "
        'that run it are searched; the export switches it on.'),
    'lora_targets': QT_TRANSLATE_NOOP(
        'InputPanel', 'Projections that get an adapter: attention (q, k, v, o) or every '
        'linear layer (also gate, up, down).'),
    'zero': QT_TRANSLATE_NOOP(
        'InputPanel', 'ZeRO stages to try: 0 plain data parallel; 1 shards optimizer states; '
        '2 also gradients; 3 (FSDP) also weights.'),
    'recompute': QT_TRANSLATE_NOOP(
        'InputPanel', 'Activation recompute to try: none keeps every activation; selective '
        'recomputes attention; full recomputes whole layers (≈ +33 % compute); half '
        'recomputes every other layer.'),
    'margin': QT_TRANSLATE_NOOP(
        'InputPanel', 'GPU memory kept free for fragmentation spikes and what the model '
        'misses.'),
    'price': QT_TRANSLATE_NOOP(
        'InputPanel', "USD per GPU-hour; blank for the catalog's indicative price."),
    'base_lr': QT_TRANSLATE_NOOP(
        'InputPanel', 'A learning rate known to work at the base batch (for LR scaling '
        'rules).'),
    'base_batch': QT_TRANSLATE_NOOP(
        'InputPanel', 'The global batch (sequences) the base LR was tuned at.'),
    'b_noise': QT_TRANSLATE_NOOP(
        'InputPanel', 'Measured gradient noise scale B_noise in tokens (≈ the critical batch, '
        'McCandlish et al. 2018); blank: the DeepSeek scaling law stands in.'),
}


# a unit typed after the batch: 4Mtok, 1kseq (planner.limits.parse_global_batch)
_UNIT_WORD = re.compile(r'(tok|token|tokens|seq|seqs|sequences|samples)$')


@lru_cache(maxsize=1)
def _presets() -> tuple[tuple[str, str], ...]:
    from planner.models.presets import load_presets

    return tuple((key, spec.name) for key, spec in load_presets().items())


@lru_cache(maxsize=1)
def _gpus() -> tuple[tuple[str, str], ...]:
    from planner.hardware.catalog import load_gpus

    return tuple((key, spec.name) for key, spec in load_gpus().items())


@lru_cache(maxsize=1)
def _links() -> tuple[tuple[str, str], ...]:
    from planner.hardware.catalog import load_interconnects

    return tuple((key, spec.name) for key, spec in load_interconnects().items())


@lru_cache(maxsize=64)
def _resolve(text: str):
    from planner.models.source import resolve_model

    return resolve_model(text)


def describe_model(text: str) -> str:
    """'8.03 B parameters · 32 layers · hidden 4096' for a model text (raises InputError)."""
    spec = _resolve(text)
    params = spec.total_params()
    extra = translate('InputPanel', ' ({active:.2f} B active)').format(
        active=spec.active_params() / 1e9) if spec.moe else ''
    return translate('InputPanel', '{name}: {params:,.2f} B parameters{extra} · {layers} layers'
                     ' · hidden {hidden} · {heads} heads').format(
        name=spec.name, params=params / 1e9, extra=extra, layers=spec.num_layers,
        hidden=spec.hidden_size, heads=spec.num_heads)


def _narrow(combo: QComboBox) -> None:
    """Let a combo of long names (GPUs, networks) shrink with the dock; its popup still
    shows them whole. Otherwise the longest name sets the panel's minimum width and the
    scroll area cuts off the fields' right edge."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(12)


def _described_combo(table) -> QComboBox:
    """A combo of ``table``'s keys (the CLI's values), each described in its tooltip."""
    combo = QComboBox()
    for key, item in table.items():
        combo.addItem(key, key)
        combo.setItemData(combo.count() - 1, core_text(item.description),
                          Qt.ItemDataRole.ToolTipRole)
    return combo


class InputPanel(QScrollArea):
    """Every plan input, grouped; emits :attr:`changed` on each edit."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setMinimumWidth(330)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(6, 6, 6, 6)
        self._tips: dict[QWidget, str] = {}
        self._notes: dict[QWidget, tuple[QFormLayout, QLabel]] = {}
        self._labels: dict[QWidget, str] = {}
        self._warnings: dict[str, str] = {}
        self._local_count = 0

        self._build_model_group(layout)
        self._build_batch_and_training_length_group(layout)
        self._build_hardware_group(layout)
        self._build_options_group(layout)

        self.error_label = QLabel()
        self.error_label.setObjectName('error_label')
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet('color: #c62828;')
        layout.addWidget(self.error_label)
        layout.addStretch(1)
        self.setWidget(body)

        self._flag_widgets: dict[str, QWidget] = {
            '--model': self.model_edit, '--seq-len': self.seq_len_edit,
            '--global-batch': self.batch_edit, '--global-batch-tokens': self.batch_edit,
            '--tokens': self.tokens_edit, '--samples': self.samples_edit,
            '--epochs': self.epochs_edit, '--gpu': self.gpu_combo, '--nodes': self.nodes_spin,
            '--gpus-per-node': self.gpus_per_node_spin, '--inter-node': self.inter_node_combo,
            '--precision': self.precision_combo, '--optimizer': self.optimizer_combo,
            '--framework': self.framework_combo,
            '--zero': self.zero_row, '--recompute': self.recompute_row,
            '--margin': self.margin_spin, '--price': self.price_edit,
            '--base-lr': self.base_lr_edit, '--base-batch': self.base_batch_edit,
            '--b-noise': self.b_noise_edit, '--lora-rank': self.lora_rank_spin,
            '--lora-targets': self.lora_targets_combo, '--qlora': self.tuning_combo,
            '--loop': self.loop_combo, '--loss': self.loss_combo,
            '--compile': self.switch_row, '--async-tp': self.switch_row,
            '--overlap-grad-reduce': self.switch_row,
            '--partition-activations': self.switch_row, '--zero-bubble': self.switch_row,
            '--tp-comm-overlap': self.switch_row, '--grad-reduce-in-bf16': self.switch_row,
        }
        self.set_inputs(PlanInputs())
        for edit in (self.model_edit, self.seq_len_edit, self.batch_edit, self.tokens_edit,
                     self.samples_edit, self.epochs_edit, self.price_edit, self.base_lr_edit,
                     self.base_batch_edit, self.b_noise_edit, self.nodes_spin,
                     self.gpus_per_node_spin, self.margin_spin, self.lora_rank_spin):
            edit.textChanged.connect(self._edited)
        self._batch_unit = self.batch_unit_combo.currentData()
        self.batch_unit_combo.currentIndexChanged.connect(self._batch_unit_changed)
        for combo in (self.length_kind_combo, self.gpu_combo,
                      self.inter_node_combo, self.precision_combo, self.optimizer_combo,
                      self.tuning_combo, self.lora_targets_combo, self.loop_combo,
                      self.loss_combo, self.framework_combo):
            combo.currentIndexChanged.connect(self._edited)
        for check in (*self.zero_boxes.values(), *self.recompute_boxes.values(),
                      *self.switch_boxes.values()):
            check.toggled.connect(self._edited)
        self.gpu_combo.currentIndexChanged.connect(self._gpu_picked)

    # ---- building --------------------------------------------------------------------

    def _build_model_group(self, layout: QVBoxLayout) -> None:
        """The "Model" group of fields."""
        # model
        box, form = self._group(translate('InputPanel', 'Model'))
        self.model_edit = QLineEdit()
        self.model_edit.setObjectName('model_edit')
        self.model_edit.setPlaceholderText(
            translate('InputPanel', 'preset, size (7B) or config.json'))
        words = [key for key, _ in _presets()] + [name for _, name in _presets()]
        completer = QCompleter(sorted(set(words), key=str.lower), self.model_edit)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.model_edit.setCompleter(completer)
        browse = QToolButton()
        browse.setText('…')
        browse.setToolTip(translate('InputPanel', 'Open a Hugging Face config.json'))
        browse.clicked.connect(self._browse_config)
        row = QHBoxLayout()
        row.addWidget(self.model_edit, 1)
        row.addWidget(browse)
        self._add_row(form, translate('InputPanel', 'model'), row, self.model_edit,
                      TIPS['model'])
        self.model_info = QLabel()
        self.model_info.setObjectName('model_info')
        self.model_info.setWordWrap(True)
        form.addRow(self.model_info)
        self.seq_len_edit = self._line(form, translate('InputPanel', 'sequence length'),
                                       'seq_len', TIPS['seq_len'])
        layout.addWidget(box)

    def _build_batch_and_training_length_group(self, layout: QVBoxLayout) -> None:
        """The "Batch and training length" group of fields."""
        # batch and length
        box, form = self._group(translate('InputPanel', 'Batch and training length'))
        self.batch_edit = QLineEdit()
        self.batch_edit.setObjectName('batch_edit')
        self.batch_unit_combo = QComboBox()
        self.batch_unit_combo.addItem(translate('InputPanel', 'sequences', 'unit'), 'samples')
        self.batch_unit_combo.addItem(translate('InputPanel', 'tokens', 'unit'), 'tokens')
        row = QHBoxLayout()
        row.addWidget(self.batch_edit, 1)
        row.addWidget(self.batch_unit_combo)
        self._add_row(form, translate('InputPanel', 'global batch'), row, self.batch_edit,
                      TIPS['batch'])
        self.batch_info = QLabel()
        self.batch_info.setWordWrap(True)
        form.addRow(self.batch_info)
        self.length_kind_combo = QComboBox()
        self.length_kind_combo.addItem(translate('InputPanel', 'token budget'), 'tokens')
        self.length_kind_combo.addItem(translate('InputPanel', 'data set × epochs'), 'samples')
        self._add_row(form, translate('InputPanel', 'training length'), self.length_kind_combo,
                      self.length_kind_combo, TIPS['length'])
        self.tokens_edit = self._line(form, translate('InputPanel', 'tokens'), 'tokens',
                                      TIPS['length'])
        self.samples_edit = self._line(form, translate('InputPanel', 'sequences in data set'),
                                       'samples', TIPS['length'])
        self.epochs_edit = self._line(form, translate('InputPanel', 'epochs'), 'epochs',
                                      TIPS['length'])
        self._length_form = form
        layout.addWidget(box)

    def _build_hardware_group(self, layout: QVBoxLayout) -> None:
        """The "Hardware" group of fields."""
        # hardware
        box, form = self._group(translate('InputPanel', 'Hardware'))
        self.gpu_combo = QComboBox()
        self.gpu_combo.setObjectName('gpu_combo')
        self.gpu_combo.setMaxVisibleItems(20)
        _narrow(self.gpu_combo)
        self._add_row(form, translate('InputPanel', 'GPU'), self.gpu_combo, self.gpu_combo,
                      TIPS['gpu'])
        self.nodes_spin = CountEdit('nodes')
        self._add_row(form, translate('InputPanel', 'nodes'), self.nodes_spin, self.nodes_spin,
                      TIPS['nodes'])
        self.gpus_per_node_spin = CountEdit('gpus_per_node')
        self._add_row(form, translate('InputPanel', 'GPUs per node'), self.gpus_per_node_spin,
                      self.gpus_per_node_spin, TIPS['gpus_per_node'])
        self.inter_node_combo = QComboBox()
        _narrow(self.inter_node_combo)
        self.inter_node_combo.addItem(translate('InputPanel', 'default for the GPU family'), '')
        for key, name in _links():
            self.inter_node_combo.addItem(f'{name} ({key})', key)
        self._add_row(form, translate('InputPanel', 'inter-node link'), self.inter_node_combo,
                      self.inter_node_combo, TIPS['inter_node'])
        layout.addWidget(box)
        self._fill_gpu_combo()

    def _build_options_group(self, layout: QVBoxLayout) -> None:
        """The "Options" group of fields."""
        # options: the keys are the CLI's values; their descriptions are item tooltips
        box, form = self._group(translate('InputPanel', 'Options'))
        self.framework_combo = QComboBox()
        _narrow(self.framework_combo)
        self.framework_combo.addItem(translate('InputPanel', 'any stack'), '')
        for key, stack in STACKS.items():
            self.framework_combo.addItem(f'{core_text(stack.label)} ({key})', key)
            self.framework_combo.setItemData(self.framework_combo.count() - 1,
                                             core_text(stack.description),
                                             Qt.ItemDataRole.ToolTipRole)
        self._add_row(form, translate('InputPanel', 'stack'), self.framework_combo,
                      self.framework_combo, TIPS['framework'])
        self.precision_combo = _described_combo(RECIPES)
        self.precision_combo.insertItem(0, translate('InputPanel', "the stack's own"), '')
        self._add_row(form, translate('InputPanel', 'precision'), self.precision_combo,
                      self.precision_combo, TIPS['precision'])
        self.switch_boxes = {'compile': QCheckBox(translate('InputPanel', 'torch.compile')),
                             'async_tp': QCheckBox(translate('InputPanel', 'async TP')),
                             'overlap_grad_reduce': QCheckBox(
                                 translate('InputPanel', 'overlap grad reduce')),
                             'partition_activations': QCheckBox(
                                 translate('InputPanel', 'partition activations')),
                             'zero_bubble': QCheckBox(translate('InputPanel', 'zero bubble')),
                             'tp_comm_overlap': QCheckBox(
                                 translate('InputPanel', 'TP comm overlap')),
                             'grad_reduce_in_bf16': QCheckBox(
                                 translate('InputPanel', 'grad reduce in bf16'))}
        # one a line: side by side they would widen the dock past its 1024 px width
        self.switch_row = self._checks(form, translate('InputPanel', 'stack switches'),
                                       self.switch_boxes, TIPS['switches'], columns=1)
        self.optimizer_combo = _described_combo(OPTIMIZERS)
        self._add_row(form, translate('InputPanel', 'optimizer'), self.optimizer_combo,
                      self.optimizer_combo, TIPS['optimizer'])
        self.loop_combo = QComboBox()
        for key, label in (('keep-outputs', QT_TRANSLATE_NOOP('InputPanel',
                                                              'accelerate / plain loop')),
                           ('trainer', QT_TRANSLATE_NOOP('InputPanel', 'HF Trainer / TRL'))):
            self.loop_combo.addItem(translate('InputPanel', label), key)
        self._add_row(form, translate('InputPanel', 'training loop'), self.loop_combo,
                      self.loop_combo, TIPS['loop'])
        self.loss_combo = QComboBox()
        for key, label in (('', QT_TRANSLATE_NOOP('InputPanel', "framework's")),
                           ('hf', QT_TRANSLATE_NOOP('InputPanel', 'HF cross-entropy')),
                           ('chunked', QT_TRANSLATE_NOOP('InputPanel', 'chunked (Liger)')),
                           ('vocab-parallel', QT_TRANSLATE_NOOP('InputPanel',
                                                                'vocab-parallel'))):
            self.loss_combo.addItem(translate('InputPanel', label), key)
        self._add_row(form, translate('InputPanel', 'loss'), self.loss_combo,
                      self.loss_combo, TIPS['loss'])
        self.tuning_combo = QComboBox()
        for key, label in (('full', QT_TRANSLATE_NOOP('InputPanel', 'full training')),
                           ('lora', QT_TRANSLATE_NOOP('InputPanel', 'LoRA')),
                           ('qlora', QT_TRANSLATE_NOOP('InputPanel', 'QLoRA (4-bit base)'))):
            self.tuning_combo.addItem(translate('InputPanel', label), key)
        self._add_row(form, translate('InputPanel', 'fine-tuning'), self.tuning_combo,
                      self.tuning_combo, TIPS['tuning'])
        self.lora_rank_spin = CountEdit('lora_rank')
        self.lora_targets_combo = QComboBox()
        for key, label in (('attention', QT_TRANSLATE_NOOP('InputPanel', 'attention')),
                           ('all', QT_TRANSLATE_NOOP('InputPanel', 'all linear layers'))):
            self.lora_targets_combo.addItem(translate('InputPanel', label), key)
        _narrow(self.lora_targets_combo)
        self._add_row(form, translate('InputPanel', 'adapter rank'), self.lora_rank_spin,
                      self.lora_rank_spin, TIPS['lora_rank'])
        self._add_row(form, translate('InputPanel', 'adapter targets'), self.lora_targets_combo,
                      self.lora_targets_combo, TIPS['lora_targets'])
        self.zero_boxes = {z: QCheckBox(str(z)) for z in ZERO_STAGES}
        self.zero_row = self._checks(form, translate('InputPanel', 'ZeRO stages'),
                                     self.zero_boxes, TIPS['zero'])
        self.recompute_boxes = {m: QCheckBox(core_text(m)) for m in RECOMPUTE_MODES}
        # one a line: a stack names them in its own (long) words
        self.recompute_row = self._checks(form, translate('InputPanel', 'recompute'),
                                          self.recompute_boxes, TIPS['recompute'], columns=1)
        self.margin_spin = CountEdit('margin_percent')
        self._add_row(form, translate('InputPanel', 'memory margin (%)'), self.margin_spin,
                      self.margin_spin, TIPS['margin'])
        self.price_edit = self._line(form, translate('InputPanel', 'price (USD/GPU-hour)'),
                                     'price', TIPS['price'])
        self.price_edit.setPlaceholderText(translate('InputPanel', 'catalog price'))
        self.base_lr_edit = self._line(form, translate('InputPanel', 'base LR'), 'base_lr',
                                       TIPS['base_lr'])
        self.base_batch_edit = self._line(form,
                                          translate('InputPanel', 'base batch (sequences)'),
                                          'base_batch', TIPS['base_batch'])
        self.b_noise_edit = self._line(form, translate('InputPanel', 'B_noise (tokens)'),
                                       'b_noise', TIPS['b_noise'])
        layout.addWidget(box)

    def _group(self, title: str) -> tuple[QGroupBox, QFormLayout]:
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        # a field too wide beside its label goes below it, rather than widening the dock
        # past the window (a stack's own recompute words are long)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        return box, form

    def _add_row(self, form: QFormLayout, label: str, field, tip_widget: QWidget,
                 tip: str) -> None:
        lab = QLabel(label)
        tip = translate('InputPanel', tip)  # a TIPS entry, marked with QT_TRANSLATE_NOOP
        lab.setToolTip(tip)
        tip_widget.setToolTip(tip)
        self._tips[tip_widget] = tip
        form.addRow(lab, field)
        # the reason a value is refused (or a warning), right under the field
        note = QLabel()
        note.setWordWrap(True)
        note.setObjectName(f'{tip_widget.objectName() or "field"}_note')
        form.addRow(note)
        form.setRowVisible(note, False)
        self._notes[tip_widget] = (form, note)
        self._labels[tip_widget] = label

    def _line(self, form: QFormLayout, label: str, name: str, tip: str) -> QLineEdit:
        edit = QLineEdit()
        edit.setObjectName(f'{name}_edit')
        self._add_row(form, label, edit, edit, tip)
        return edit

    def _checks(self, form: QFormLayout, label: str, boxes: dict, tip: str,
                columns: int = 0) -> QWidget:
        """Check boxes in a grid of ``columns`` (0: one row), as one form row."""
        row = QWidget()
        lay = QGridLayout(row)
        lay.setContentsMargins(0, 0, 0, 0)
        per_row = columns or len(boxes)
        for i, box in enumerate(boxes.values()):
            lay.addWidget(box, i // per_row, i % per_row)
        lay.setColumnStretch(per_row, 1)
        self._add_row(form, label, row, row, tip)
        return row

    def _fill_gpu_combo(self, inventory: HardwareInventory | None = None) -> None:
        current = self.gpu_combo.currentData()
        self.gpu_combo.blockSignals(True)
        self.gpu_combo.clear()
        self._local_count = 0
        if inventory is not None and inventory.gpus:
            keys = [g.catalog for g in inventory.gpus]
            names = {g.name for g in inventory.gpus}
            key = keys[0]
            if key is not None and all(k == key for k in keys):
                self._local_count = len(keys)
                self.gpu_combo.addItem(
                    translate('InputPanel', 'This machine: {n} × {name}').format(
                        n=len(keys), name=', '.join(sorted(n for n in names if n))), key)
                self.gpu_combo.setItemData(0, 'local', Qt.ItemDataRole.UserRole + 1)
                self.gpu_combo.insertSeparator(1)
        for key, name in _gpus():
            self.gpu_combo.addItem(f'{name} ({key})', key)
        index = self.gpu_combo.findData(current) if current else 0
        self.gpu_combo.setCurrentIndex(max(index, 0))
        self.gpu_combo.blockSignals(False)

    def set_local_gpus(self, inventory: HardwareInventory) -> None:
        """Offer this machine's GPUs first in the GPU list."""
        self._fill_gpu_combo(inventory)

    def use_local_gpus(self) -> bool:
        """Select this machine's GPUs (one node of them); False when there are none."""
        if not self._local_count:
            return False
        self.gpu_combo.setCurrentIndex(0)
        self._gpu_picked(0)
        return True

    # ---- reading and writing ---------------------------------------------------------

    def set_inputs(self, inputs: PlanInputs) -> None:
        """Show ``inputs`` (one :attr:`changed` at the end)."""
        widgets = [self.model_edit, self.seq_len_edit, self.batch_edit, self.tokens_edit,
                   self.samples_edit, self.epochs_edit, self.price_edit, self.base_lr_edit,
                   self.base_batch_edit, self.b_noise_edit, self.batch_unit_combo,
                   self.length_kind_combo, self.gpu_combo, self.inter_node_combo,
                   self.precision_combo, self.optimizer_combo, self.nodes_spin,
                   self.gpus_per_node_spin, self.margin_spin, self.tuning_combo,
                   self.lora_rank_spin, self.lora_targets_combo, self.loop_combo,
                   self.loss_combo, self.framework_combo, *self.zero_boxes.values(),
                   *self.recompute_boxes.values(), *self.switch_boxes.values()]
        for w in widgets:
            w.blockSignals(True)
        try:
            self.model_edit.setText(inputs.model)
            self.seq_len_edit.setText(str(inputs.seq_len))
            self.batch_edit.setText(str(inputs.batch_value))
            self._set_combo(self.batch_unit_combo, inputs.batch_unit)
            self._set_combo(self.length_kind_combo, inputs.length_kind)
            self.tokens_edit.setText(format_count(inputs.length_tokens))
            self.samples_edit.setText(str(inputs.length_samples))
            self.epochs_edit.setText(f'{inputs.length_epochs:g}')
            local = self.gpu_combo.itemData(0, Qt.ItemDataRole.UserRole + 1) == 'local'
            if local and self.gpu_combo.itemData(0) == inputs.gpu:
                self.gpu_combo.setCurrentIndex(0)
            else:
                self._set_combo(self.gpu_combo, inputs.gpu, start=2 if local else 0)
            self.nodes_spin.setValue(inputs.nodes)
            self.gpus_per_node_spin.setValue(inputs.gpus_per_node)
            self._set_combo(self.inter_node_combo, inputs.inter_node)
            self._set_combo(self.framework_combo, inputs.framework)
            self._set_combo(self.precision_combo, inputs.precision)
            self._set_combo(self.optimizer_combo, inputs.optimizer)
            self._set_combo(self.loop_combo, inputs.loop)
            self._set_combo(self.loss_combo, 'vocab-parallel' if inputs.loss == 'megatron'
                            else inputs.loss)
            for z, box in self.zero_boxes.items():
                box.setChecked(z in inputs.zero_stages)
            for m, box in self.recompute_boxes.items():
                box.setChecked(m in inputs.recompute_modes)
            for name, box in self.switch_boxes.items():
                box.setChecked(bool(getattr(inputs, name)))
            self.margin_spin.setValue(inputs.margin_percent)
            self._set_combo(self.tuning_combo, inputs.tuning)
            self.lora_rank_spin.setValue(inputs.lora_rank)
            self._set_combo(self.lora_targets_combo, inputs.lora_targets)
            for edit, value in ((self.price_edit, inputs.price_per_gpu_hour_usd),
                                (self.base_lr_edit, inputs.base_lr),
                                (self.base_batch_edit, inputs.base_batch_samples),
                                (self.b_noise_edit, inputs.b_noise_tokens)):
                edit.setText('' if value is None else f'{value:g}')
        finally:
            for w in widgets:
                w.blockSignals(False)
        self._edited()

    @staticmethod
    def _set_combo(combo: QComboBox, data, start: int = 0) -> None:
        for i in range(start, combo.count()):
            if combo.itemData(i) == data:
                combo.setCurrentIndex(i)
                return

    def read_inputs(self) -> tuple[PlanInputs | None, dict[str, str]]:
        """The inputs shown, or None with ``{flag: reason}`` for every bad field.

        Every number is checked with the core's ranges (:mod:`planner.limits`); the
        reasons are in the user's language. Allowed but unlikely values (a sequence
        beyond the model's context, 1e12 epochs...) are kept in :attr:`warnings`.
        """
        errors: dict[str, str] = {}
        values: dict[str, object] = {}

        def take(name: str, parse) -> None:
            try:
                values[name] = parse()
            except FieldError as exc:
                errors[exc.flag] = exc.message
            except InputError as exc:
                errors[exc.field] = str(exc).split(': ', 1)[-1]

        model = self.model_edit.text().strip()
        values['model'] = model
        spec = None
        try:
            describe_model(model)
            spec = _resolve(model)
        except InputError as exc:
            errors['--model'] = str(exc).split(': ', 1)[-1]
        take('seq_len', lambda: parse_field('seq_len', self.seq_len_edit.text()))
        take('batch_value', self._batch_value)
        values['batch_unit'] = self.batch_unit_combo.currentData()
        kind = self.length_kind_combo.currentData()
        values['length_kind'] = kind
        if kind == 'tokens':
            take('length_tokens', lambda: parse_field('tokens', self.tokens_edit.text()))
        else:
            take('length_samples', lambda: parse_field('samples', self.samples_edit.text()))
            take('length_epochs', lambda: parse_field('epochs', self.epochs_edit.text()))
        values['gpu'] = self.gpu_combo.currentData()
        take('nodes', self.nodes_spin.parsed)
        take('gpus_per_node', self.gpus_per_node_spin.parsed)
        if 'nodes' in values and 'gpus_per_node' in values:
            gpus = int(values['nodes']) * int(values['gpus_per_node'])  # type: ignore[call-overload]
            if gpus > limits.MAX_GPUS:
                errors['--nodes'] = translate(
                    'InputPanel', '{gpus:,} GPUs in all is too many (allowed: up to '
                    '{most:,})').format(gpus=gpus, most=limits.MAX_GPUS)
        values['inter_node'] = self.inter_node_combo.currentData() or ''
        values['framework'] = self.framework_combo.currentData() or ''
        values['precision'] = self.precision_combo.currentData() or ''
        values['optimizer'] = self.optimizer_combo.currentData()
        values['loop'] = self.loop_combo.currentData()
        values['loss'] = self.loss_combo.currentData() or ''
        zeros = tuple(z for z, box in self.zero_boxes.items()
                      if box.isChecked() and box.isEnabled())
        if not zeros:
            errors['--zero'] = translate('InputPanel', 'tick at least one ZeRO stage')
        values['zero_stages'] = zeros
        modes = tuple(m for m, box in self.recompute_boxes.items()
                      if box.isChecked() and box.isEnabled())
        if not modes:
            errors['--recompute'] = translate('InputPanel', 'tick at least one recompute mode')
        values['recompute_modes'] = modes
        for name, box in self.switch_boxes.items():  # a disabled switch is off
            values[name] = box.isChecked() and box.isEnabled()
        take('margin_percent', self.margin_spin.parsed)
        values['tuning'] = self.tuning_combo.currentData()
        if values['tuning'] != 'full':
            take('lora_rank', self.lora_rank_spin.parsed)
        values['lora_targets'] = self.lora_targets_combo.currentData()
        take('price_per_gpu_hour_usd',
             lambda: parse_field('price', self.price_edit.text(), optional=True))
        take('base_lr', lambda: parse_field('base_lr', self.base_lr_edit.text(), optional=True))
        take('base_batch_samples',
             lambda: parse_field('base_batch', self.base_batch_edit.text(), optional=True))
        take('b_noise_tokens',
             lambda: parse_field('b_noise', self.b_noise_edit.text(), optional=True))
        if ('base_lr' in values and 'base_batch_samples' in values
                and (values['base_lr'] is None) != (values['base_batch_samples'] is None)):
            lr_flag = '--base-batch' if values['base_lr'] is not None else '--base-lr'
            errors[lr_flag] = translate('InputPanel',
                                        'give the base LR and the base batch together')
        self._warnings = self._input_warnings(values, spec)
        if errors:
            return None, errors
        return PlanInputs().with_changes(**values), {}

    @property
    def warnings(self) -> dict[str, str]:
        """``{flag: warning}`` for allowed but unlikely inputs (as of the last read)."""
        return dict(self._warnings)

    def _batch_value(self) -> int:
        """The global batch typed, in the unit chosen; a unit typed after the number
        (``4Mtok``, ``1kseq``) picks the unit."""
        text = self.batch_edit.text()
        if _UNIT_WORD.search(text.strip().lower()):
            try:
                value, unit = limits.parse_global_batch(text)
            except limits.LimitError as exc:
                raise FieldError(exc.field, reason(exc)) from None
            self._set_combo(self.batch_unit_combo, 'tokens' if unit == 'tokens' else 'samples')
            return int(value)
        key = 'global_batch_tokens' if self.batch_unit_combo.currentData() == 'tokens' \
            else 'global_batch'
        return int(parse_field(key, text))  # type: ignore[arg-type]

    @staticmethod
    def _input_warnings(values: dict[str, object], spec) -> dict[str, str]:
        """The core's warnings (planner.limits.input_warnings), in the user's language."""
        seq = values.get('seq_len')
        batch = values.get('batch_value')
        batch_tokens = None
        if isinstance(seq, int) and isinstance(batch, int):
            batch_tokens = batch if values.get('batch_unit') == 'tokens' else batch * seq
        nodes, per_node = values.get('nodes'), values.get('gpus_per_node')
        found = limits.input_warnings(
            seq_len=seq if isinstance(seq, int) else None,
            max_positions=None if spec is None else spec.max_position_embeddings,
            epochs=values.get('length_epochs') if values.get('length_kind') == 'samples'
            else None,  # type: ignore[arg-type]
            tokens=values.get('length_tokens') if values.get('length_kind') == 'tokens'
            else None,  # type: ignore[arg-type]
            batch_tokens=batch_tokens,
            gpus=nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int)
            else None)
        words = {
            'beyond_context': translate(
                'InputPanel', 'beyond the model’s context of {context:,.0f} tokens: it needs '
                'a long-context recipe'),
            'many_epochs': translate('InputPanel', '{epochs:,g} epochs is far more than '
                                                   'language models are trained for'),
            'huge_budget': translate('InputPanel', '{tokens:.3g} tokens is over 100× the '
                                                   'largest published budgets'),
            'huge_batch': translate('InputPanel', '{tokens:.3g} tokens per step is over 10× '
                                                  'the largest published batches'),
            'huge_cluster': translate('InputPanel', '{gpus:,.0f} GPUs is more than any '
                                                    'cluster built so far'),
        }
        flags = {'seq_len': '--seq-len', 'epochs': '--epochs', 'tokens': '--tokens',
                 'global_batch': '--global-batch', 'nodes': '--nodes'}
        return {flags[w.key]: words[w.code].format(**w.values) for w in found}

    # ---- errors ----------------------------------------------------------------------

    def show_errors(self, errors: dict[str, str]) -> None:
        """Mark every field in ``errors`` red with its reason under it; clear the others.

        Warnings (:attr:`warnings`) of fields without an error are shown under them in
        orange; they do not stop the plan.
        """
        marked = set()
        lines = []
        for flag, message in errors.items():
            widget = self._flag_widgets.get(flag)
            if widget is None:
                lines.append(f'{flag.lstrip("-")}: {message}')
                continue
            mark_error(widget, message)
            self._note(widget, message, error=True)
            marked.add(widget)
        for flag, message in self._warnings.items():
            widget = self._flag_widgets.get(flag)
            if widget is not None and widget not in marked:
                widget.setStyleSheet(WARNING_STYLE)
                widget.setProperty('batchfit_warning', message)
                self._note(widget, message, error=False)
                marked.add(widget)
        for widget in set(self._flag_widgets.values()) - marked:
            if error_of(widget) or widget.property('batchfit_warning'):
                mark_error(widget, None, self._tips.get(widget, ''))
                widget.setProperty('batchfit_warning', '')
            self._note(widget, None)
        self.error_label.setText('\n'.join(lines))

    def _note(self, widget: QWidget, message: str | None, error: bool = True) -> None:
        """Show ``message`` under ``widget`` (red for an error, orange for a warning)."""
        entry = self._notes.get(widget)
        if entry is None:
            return
        form, note = entry
        note.setText(message or '')
        note.setStyleSheet('color: #c62828;' if error else 'color: #ef6c00;')
        form.setRowVisible(note, bool(message))

    def note_of(self, widget: QWidget) -> str:
        """The message shown under ``widget`` ('' when none)."""
        entry = self._notes.get(widget)
        return '' if entry is None else entry[1].text()

    def show_input_error(self, exc: InputError) -> None:
        """Mark the field an :class:`InputError` from the core names (a range refusal is
        worded in the user's language)."""
        message = (reason(exc) if isinstance(exc, limits.LimitError)
                   else str(exc).split(': ', 1)[-1])
        self.show_errors({exc.field: message})

    def field_for(self, flag: str) -> QWidget | None:
        """The widget that edits ``flag`` (``--seq-len``...)."""
        return self._flag_widgets.get(flag)

    # ---- slots -----------------------------------------------------------------------

    def _show_stack_choices(self) -> None:
        """The recompute modes in the chosen stack's own words, and only the ZeRO stages and
        modes it runs enabled (every one, in generic words, for "any stack")."""
        from planner.stacks import STACKS

        stack = STACKS.get(self.framework_combo.currentData() or '')
        for m, box in self.recompute_boxes.items():
            runs = stack is None or m in stack.recompute
            box.setEnabled(runs)
            box.setText(core_text(stack.recompute[m]) if stack is not None and runs
                        else core_text(m))
        for z, box in self.zero_boxes.items():
            box.setEnabled(stack is None or z in stack.zero_stages)
        # the losses the stack's launchers switch on (every one for "any stack": the search
        # keeps the stacks that run it); a loss the stack does not run stays chosen, and the
        # core's refusal marks the field with what the stack allows
        items = self.loss_combo.model()
        assert isinstance(items, QStandardItemModel)  # a QComboBox's own model
        for i in range(self.loss_combo.count()):
            key = self.loss_combo.itemData(i)
            items.item(i).setEnabled(stack is None or not key or key in stack.losses)
        # the stack's own switches: only for a stack that has them (async TP needs compile;
        # torch builds its zero-bubble schedules only without it)
        for name, box in self.switch_boxes.items():
            box.setEnabled(stack is not None and name in stack.options)
        compiled = self.switch_boxes['compile']
        if not (compiled.isChecked() and compiled.isEnabled()):
            self.switch_boxes['async_tp'].setEnabled(False)
        else:
            self.switch_boxes['zero_bubble'].setEnabled(False)

    def _edited(self, *_args) -> None:
        self._show_stack_choices()
        kind = self.length_kind_combo.currentData()
        self._length_form.setRowVisible(self.tokens_edit, kind == 'tokens')
        self._length_form.setRowVisible(self.samples_edit, kind == 'samples')
        self._length_form.setRowVisible(self.epochs_edit, kind == 'samples')
        adapters = self.tuning_combo.currentData() != 'full'
        self.lora_rank_spin.setEnabled(adapters)
        self.lora_targets_combo.setEnabled(adapters)
        try:
            self.model_info.setText(describe_model(self.model_edit.text().strip()))
            self.model_info.setStyleSheet('')
        except InputError as exc:
            self.model_info.setText(str(exc).split(': ', 1)[-1])
            self.model_info.setStyleSheet('color: #c62828;')
        self._update_batch_info()
        self.changed.emit()

    def _update_batch_info(self) -> None:
        try:
            value = self._batch_value()
            seq = parse_field('seq_len', self.seq_len_edit.text())
        except FieldError:
            self.batch_info.setText('')
            return
        assert seq is not None  # not optional: a blank field raised FieldError
        if self.batch_unit_combo.currentData() == 'tokens':
            n = value / seq
            text = translate('InputPanel', '= {n:,.6g} sequences of {s:,.0f}').format(n=n, s=seq)
            if n != int(n):
                from planner.plans.no_plan import nice_batches

                text += translate('InputPanel', ': not whole; round batches nearby: {b}').format(
                    b=', '.join(translate('InputPanel', '{n:,} sequences ({t:,} tokens)').format(
                        n=b, t=b * seq) for b in nice_batches(n)))
        else:
            text = translate('InputPanel', '= {t:,.0f} tokens').format(t=value * seq)
        self.batch_info.setText(text)

    def _batch_unit_changed(self, *_args) -> None:
        """Sequences <-> tokens converts the number, so the batch stays the same."""
        unit = self.batch_unit_combo.currentData()
        previous, self._batch_unit = self._batch_unit, unit
        if unit != previous:
            try:
                seq = int(parse_field('seq_len', self.seq_len_edit.text()))  # type: ignore[arg-type]
                key = 'global_batch_tokens' if previous == 'tokens' else 'global_batch'
                value = int(parse_field(key, self.batch_edit.text()))  # type: ignore[arg-type]
            except FieldError:
                value = None
            if value is not None:
                converted = value * seq if unit == 'tokens' else value / seq
                text = (f'{int(converted)}' if converted == int(converted)
                        else f'{converted:.6g}')
                self.batch_edit.blockSignals(True)
                self.batch_edit.setText(text)
                self.batch_edit.blockSignals(False)
        self._edited()

    def _gpu_picked(self, index: int) -> None:
        if self.gpu_combo.itemData(index, Qt.ItemDataRole.UserRole + 1) == 'local':
            self.nodes_spin.setValue(1)
            self.gpus_per_node_spin.setValue(self._local_count)

    def _browse_config(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, translate('InputPanel', 'Open a Hugging Face config.json'), '',
            translate('InputPanel', 'config.json (*.json);;All files (*)'))
        if path:
            self.model_edit.setText(path)


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    w = InputPanel()
    w.changed.connect(lambda: print(w.read_inputs()))
    w.show()
    app.exec()
