"""Translations: the catalogs are complete and compiled, the app picks and installs them.

The .ts file is the source of truth: every message finished, placeholders kept, the
committed .qm compiled from it, and lupdate over ui/ finding nothing new (so a string
added without a translation fails here). Then the runtime: ui.i18n installs the catalogs,
follows the system locale and falls back to English; ui.core_terms covers the core's
labels and sentences. No assertion depends on a font.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QLocale, Qt, QTranslator
from PySide6.QtWidgets import QGroupBox

from ui import core_terms, i18n

UI_DIR = Path(i18n.__file__).resolve().parent
TS_FILES = sorted(i18n.TRANSLATIONS_DIR.glob('*.ts'))
PLACEHOLDER = re.compile(r'\{[^{}]*\}')
CJK = re.compile(r'[\u4e00-\u9fff]')


def _messages(ts: Path) -> list[dict]:
    """Every message of a .ts: context, source, comment, translation(s), attributes."""
    out = []
    for ctx in ET.parse(ts).getroot().iter('context'):
        name = ctx.findtext('name')
        for m in ctx.iter('message'):
            tr = m.find('translation')
            forms = [f.text or '' for f in tr.iter('numerusform')]
            out.append({'context': name, 'source': m.findtext('source'),
                        'comment': m.findtext('comment'), 'numerus': m.get('numerus') == 'yes',
                        'type': tr.get('type'), 'translations': forms or [tr.text or '']})
    return out


def _lupdate() -> str | None:
    """The pyside6-lupdate next to this interpreter, else on PATH."""
    here = Path(sys.executable).parent / 'pyside6-lupdate'
    return str(here) if here.exists() else shutil.which('pyside6-lupdate')


def _has_cjk(text: str) -> bool:
    return bool(CJK.search(text))


@pytest.fixture
def english(qapp):
    """No translator of ours before or after the test (other tests expect English)."""
    i18n.remove_translators(qapp)
    yield qapp
    i18n.remove_translators(qapp)


@pytest.fixture
def chinese(english):
    """Simplified Chinese installed for the test, removed after."""
    loaded = i18n.install_translators(english, i18n.CHINESE)
    assert loaded[:1] == [str(i18n.catalog_path(i18n.CHINESE))]
    return loaded


# ---- the catalogs ------------------------------------------------------------------------

def test_there_is_a_catalog_per_language():
    assert [p.name for p in TS_FILES] == ['batchfit_zh_CN.ts']
    for code in i18n.LANGUAGES:
        if code != i18n.ENGLISH:
            assert i18n.catalog_path(code).is_file(), f'{code}: run make translations'


@pytest.mark.parametrize('ts', TS_FILES, ids=lambda p: p.name)
def test_every_message_is_translated(ts):
    messages = _messages(ts)
    assert len(messages) > 300
    bad = [(m['context'], m['source']) for m in messages
           if m['type'] is not None or not all(t.strip() for t in m['translations'])]
    assert not bad, f'unfinished, obsolete or empty in {ts.name}: {bad}'


@pytest.mark.parametrize('ts', TS_FILES, ids=lambda p: p.name)
def test_placeholders_are_kept(ts):
    for m in _messages(ts):
        want = sorted(PLACEHOLDER.findall(m['source']))
        for text in m['translations']:
            assert sorted(PLACEHOLDER.findall(text)) == want, (m['context'], m['source'], text)
            if m['numerus']:
                assert '%n' in text, (m['context'], m['source'], text)


@pytest.mark.parametrize('ts', TS_FILES, ids=lambda p: p.name)
def test_the_committed_qm_is_compiled_from_the_ts(qapp, ts):
    translator = QTranslator()
    assert translator.load(str(ts.with_suffix('.qm')))
    for m in _messages(ts):
        if m['numerus']:  # one check per form; n picks the form by the language's rules
            got = translator.translate(m['context'], m['source'], m['comment'], 1)
            assert got in m['translations'], (m['context'], m['source'])
        else:
            got = translator.translate(m['context'], m['source'], m['comment'])
            assert got == m['translations'][0], (m['context'], m['source'], 'make translations')


@pytest.mark.parametrize('ts', TS_FILES, ids=lambda p: p.name)
def test_lupdate_finds_no_untranslated_string(tmp_path, ts):
    """A string added to ui/ without a translation fails here (run make translations)."""
    binary = _lupdate()
    if binary is None:
        pytest.skip('pyside6-lupdate not installed (it ships with PySide6-Essentials)')
    copy = tmp_path / ts.name
    shutil.copy(ts, copy)
    run = subprocess.run([binary, '-extensions', 'py', '-locations', 'none', '-no-obsolete',
                          str(UI_DIR), '-ts', str(copy)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    new = [(m['context'], m['source']) for m in _messages(copy)
           if m['type'] is not None or not all(t.strip() for t in m['translations'])]
    assert not new, f'strings without a translation (make translations, then translate): {new}'


def test_lupdate_check_catches_a_new_string(tmp_path):
    """The check above is not vacuous: an unmarked new string shows up as unfinished."""
    binary = _lupdate()
    if binary is None:
        pytest.skip('pyside6-lupdate not installed (it ships with PySide6-Essentials)')
    src = tmp_path / 'ui'
    shutil.copytree(UI_DIR, src, ignore=shutil.ignore_patterns('__pycache__', '*.qm'))
    (src / 'widgets' / 'new_widget.py').write_text(
        "from ui.i18n import translate\n\nLABEL = translate('NewWidget', 'Brand new label')\n",
        encoding='utf-8')
    ts = tmp_path / 'batchfit_zh_CN.ts'
    shutil.copy(TS_FILES[0], ts)
    subprocess.run([binary, '-extensions', 'py', '-locations', 'none', '-no-obsolete',
                    str(src), '-ts', str(ts)], capture_output=True, timeout=120, check=True)
    new = [(m['context'], m['source']) for m in _messages(ts) if m['type'] == 'unfinished']
    assert new == [('NewWidget', 'Brand new label')]


def test_no_module_hides_strings_from_lupdate():
    """lupdate cannot see calls through a local helper: ui/ has no _tr() left."""
    offenders = [str(p.relative_to(UI_DIR)) for p in UI_DIR.rglob('*.py')
                 if re.search(r'^def _tr\(', p.read_text(encoding='utf-8'), re.MULTILINE)]
    assert not offenders, f'use ui.i18n.translate instead of a _tr helper in {offenders}'


# ---- installing and choosing -------------------------------------------------------------

def test_chinese_shows_in_the_widgets_and_english_comes_back(english, qtbot):
    from ui.widgets.input_panel import InputPanel
    from ui.widgets.results_view import ResultsView

    assert i18n.install_translators(english, i18n.CHINESE)
    assert i18n.current_language() == i18n.CHINESE
    panel, results = InputPanel(), ResultsView()
    qtbot.addWidget(panel)
    qtbot.addWidget(results)
    titles = [box.title() for box in panel.findChildren(QGroupBox)]
    assert len(titles) == 4
    assert all(_has_cjk(t) for t in titles), titles
    assert _has_cjk(results.pareto_check.text())
    assert _has_cjk(panel.recompute_boxes['selective'].text())
    assert _has_cjk(results.model.headerData(1, Qt.Orientation.Horizontal))
    assert _has_cjk(panel.model_info.text())

    assert i18n.install_translators(english, i18n.ENGLISH) == []
    assert i18n.current_language() == i18n.ENGLISH
    again = ResultsView()
    qtbot.addWidget(again)
    assert again.pareto_check.text() == 'Pareto front only'
    assert again.model.headerData(1, Qt.Orientation.Horizontal) == 'GPUs'


def test_qt_standard_buttons_follow(chinese, qtbot):
    from PySide6.QtWidgets import QDialogButtonBox

    if not any('qtbase_' in path for path in chinese):
        pytest.skip("this PySide6 wheel ships no qtbase_zh_CN.qm")
    box = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    qtbot.addWidget(box)
    assert _has_cjk(box.button(QDialogButtonBox.StandardButton.Close).text())


def test_install_replaces_instead_of_stacking(english):
    first = i18n.install_translators(english, i18n.CHINESE)
    second = i18n.install_translators(english, i18n.CHINESE)
    assert first == second
    assert len(i18n._installed) == len(second)


def test_a_missing_catalog_falls_back_to_english(english, monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(i18n, 'TRANSLATIONS_DIR', tmp_path)
    with caplog.at_level('WARNING', logger='ui.i18n'):
        assert i18n.install_translators(english, i18n.CHINESE) == []
    assert 'showing English' in caplog.text
    assert i18n.current_language() == i18n.ENGLISH
    assert QCoreApplication.translate('InputPanel', 'Model') == 'Model'


def test_a_corrupt_catalog_falls_back_to_english(english, monkeypatch, tmp_path):
    (tmp_path / 'batchfit_zh_CN.qm').write_bytes(b'not a qm file')
    monkeypatch.setattr(i18n, 'TRANSLATIONS_DIR', tmp_path)
    assert i18n.install_translators(english, i18n.CHINESE) == []
    assert i18n.current_language() == i18n.ENGLISH


def test_an_unknown_language_installs_nothing(english):
    assert i18n.install_translators(english, 'fr') == []
    assert i18n.current_language() == i18n.ENGLISH


@pytest.mark.parametrize(('ui_languages', 'expected'), [
    (['zh-Hans-CN', 'zh-CN', 'zh-Hans', 'zh'], 'zh_CN'),
    (['zh-Hans-SG', 'zh-SG', 'zh-Hans', 'zh'], 'zh_CN'),
    (['zh'], 'zh_CN'),
    (['zh-Hant-TW', 'zh-TW', 'zh-Hant', 'zh'], 'en'),  # Traditional: not offered
    (['zh-Hant-HK', 'zh-HK', 'zh-Hant', 'zh', 'zh-CN'], 'zh_CN'),  # unless listed after
    (['de-Latn-DE', 'de-DE', 'de-Latn', 'de', 'zh-CN'], 'zh_CN'),
    (['en-Latn-US', 'en-US', 'zh-CN'], 'en'),
    (['fr-FR', 'ja-JP'], 'en'),
    (['C'], 'en'),
    ([], 'en'),
])
def test_match_language(ui_languages, expected):
    assert i18n.match_language(ui_languages) == expected


@pytest.mark.parametrize(('locale', 'expected'), [
    ('zh_CN', 'zh_CN'), ('zh_SG', 'zh_CN'), ('zh_TW', 'en'), ('en_US', 'en'), ('de_DE', 'en'),
])
def test_the_system_locale_decides_by_default(monkeypatch, locale, expected):
    monkeypatch.setattr(i18n, '_system_locale', lambda: QLocale(locale))
    assert i18n.system_language() == expected
    assert i18n.saved_language() == ''
    assert i18n.resolve_language() == expected


def test_the_saved_choice_beats_the_system_and_an_option_beats_both(monkeypatch):
    monkeypatch.setattr(i18n, '_system_locale', lambda: QLocale('zh_CN'))
    i18n.set_saved_language('en')
    assert i18n.saved_language() == 'en'
    assert i18n.resolve_language() == 'en'
    assert i18n.resolve_language('zh_CN') == 'zh_CN'
    assert i18n.resolve_language('zh-CN') == 'zh_CN'
    i18n.set_saved_language('')
    assert i18n.resolve_language() == 'zh_CN'
    assert i18n.resolve_language('en_US') == 'en'


def test_an_unsupported_option_or_setting_is_ignored(monkeypatch):
    from ui.settings import settings

    monkeypatch.setattr(i18n, '_system_locale', lambda: QLocale('en_US'))
    assert i18n.resolve_language('fr') == 'en'
    settings().setValue(i18n.SETTINGS_KEY, 'klingon')
    assert i18n.saved_language() == ''
    with pytest.raises(ValueError, match='unsupported language'):
        i18n.set_saved_language('klingon')


def test_language_choices_name_each_language_in_itself(chinese):
    choices = i18n.language_choices()
    assert [code for code, _ in choices] == ['', 'en', 'zh_CN']
    assert _has_cjk(choices[0][1])  # "follow the system" is translated
    assert dict(choices)['en'] == 'English'
    assert dict(choices)['zh_CN'] == '简体中文'


# ---- the core's texts --------------------------------------------------------------------

def _core_labels() -> set[str]:
    """Every fixed label the core defines that the UI shows."""
    from planner.calibrate.protocol import STAGES
    from planner.export import EXPORTERS
    from planner.memory.peak import PHASES
    from planner.memory.recipes import OPTIMIZERS, RECIPES
    from planner.memory.report import COMPONENT_LABELS, OVERHEAD_LABELS
    from planner.stacks import STACKS
    from planner.timing.step_time import RECOMPUTE_MODES
    from ui.plan_compute import compute_plan
    from ui.plan_inputs import PlanInputs

    c = compute_plan(PlanInputs()).candidates[0]
    return {*COMPONENT_LABELS.values(), *OVERHEAD_LABELS.values(),
            *(p.replace('_', ' ') for p in PHASES), *RECOMPUTE_MODES,
            *(k.removesuffix('_s').replace('_', ' ') for k in c.step_breakdown_s),
            *(r.description for r in RECIPES.values()),
            *(o.description for o in OPTIMIZERS.values()),
            *(e.summary for e in EXPORTERS.values()), *STAGES,
            *(s.label for s in STACKS.values()), *(s.description for s in STACKS.values())}


def test_every_core_label_is_a_term():
    missing = _core_labels() - set(core_terms.TERMS)
    assert not missing, f'add these to ui/core_terms.py TERMS and translate them: {missing}'


def _guidance_texts() -> list[str]:
    """Warnings, notes and other guidance strings, from the real planner.plans.guidance."""
    from planner.models.source import resolve_model
    from planner.plans import guidance
    from planner.plans.guidance import advise

    model = resolve_model('llama-3.1-8b')
    runs = [
        advise(model, 4096, 1024, total_tokens=1e12, micro_batch=1, grad_accum=128,
               efficiency_fraction=0.5, gemm_flops=3e10, step_time_s=80.4),
        advise(model, 4096, 1024, b_noise_tokens=1e6, base_lr=3e-4, base_batch_samples=256,
               micro_batch=1, grad_accum=64, efficiency_fraction=0.5),
        advise(model, 4096, 1024, total_tokens=1e9, b_noise_tokens=1e9, base_lr=3e-4,
               base_batch_samples=256, base_warmup_steps=2000),
        advise(model, 4096, 1024, total_tokens=1e12, base_lr=3e-4, base_batch_samples=256,
               base_warmup_steps=100, optimizer='sgd'),
        advise(model, 4096, 64),
    ]
    # fixed notes the module keeps as constants (e.g. the LoRA learning-rate note)
    texts = [v for k, v in vars(guidance).items() if k.endswith('_NOTE') and isinstance(v, str)]
    for g in runs:
        texts += [*g.warnings, *g.notes, g.warmup_note, g.critical_batch_source]
        if g.learning_rates is not None:
            texts.append(g.learning_rates.rule)
    return texts


def _nvml_messages(monkeypatch) -> list[str]:
    from planner.hardware.local import nvml
    from tests.planner import fake_nvml

    out = []
    for fake in (fake_nvml.FakeNvml(init_error=fake_nvml.LIBRARY_NOT_FOUND),
                 fake_nvml.FakeNvml(init_error=fake_nvml.DRIVER_NOT_LOADED),
                 fake_nvml.FakeNvml(init_error=fake_nvml.LIB_RM_VERSION_MISMATCH),
                 fake_nvml.FakeNvml(init_error=fake_nvml.NO_PERMISSION),
                 fake_nvml.FakeNvml(init_error=fake_nvml.UNKNOWN),
                 fake_nvml.FakeNvml([])):
        fake_nvml.install(monkeypatch, fake)
        out.append(nvml.probe().message)
    return out


def _calibration_messages() -> list[str]:
    from planner.calibrate.runner import classify

    # progress messages come from the child (torch); these copy its f-strings
    return [classify(None, [], timed_out=True, timeout_s=600)[1],
            classify(None, [], cancelled=True)[1],
            classify(0, [{'event': 'result'}])[1],
            'probing micro-batch 8', 'largest micro-batch 16', 'best GEMM 612 TFLOP/s',
            '2/4-layer proxy: timing', '4-layer proxy: memory at micro-batch 2',
            'qkv at 8192 tokens', 'cuda: starting', 'fitting the step-time model']


def test_core_sentences_are_all_covered_and_translated(chinese, monkeypatch):
    texts = _guidance_texts() + _nvml_messages(monkeypatch) + _calibration_messages()
    uncovered = [t for t in texts
                 if t not in core_terms.TERMS and core_terms.match_sentence(t) is None]
    assert not uncovered, f'core texts ui/core_terms.py does not know (reworded?): {uncovered}'
    for text in texts:
        shown = core_terms.core_text(text)
        assert _has_cjk(shown), text
        assert '{' not in shown, shown  # every field filled
    used = {core_terms.match_sentence(t)[0] for t in texts if t not in core_terms.TERMS}
    assert used == set(core_terms.SENTENCES)


def test_core_sentence_fields_are_kept_and_nested_terms_translated(chinese):
    warning = ('global batch 4.19M tokens is 4.2x the critical batch (1.00M, gradient noise '
               'scale given (--b-noise)): more GPUs, little speed-up. Reaching a given loss '
               'takes 5.2x the minimum data, and doubling the batch again would cut the '
               'steps only to 90%')
    shown = core_terms.core_text(warning)
    for value in ('4.19', '4.2', '1.00', '5.2', '90%'):
        assert value in shown
    assert core_terms.core_text('gradient noise scale given (--b-noise)') in shown
    capped = core_terms.core_text('GPT-3 warmed up over 375M tokens (Brown et al. 2020); '
                                  'capped at 10 % of the run')
    assert core_terms.core_text('GPT-3 warmed up over 375M tokens (Brown et al. 2020)') in capped


def test_core_text_is_the_identity_in_english(english, monkeypatch):
    texts = [*_core_labels(), *_guidance_texts(), *_nvml_messages(monkeypatch),
             *_calibration_messages()]
    assert all(core_terms.core_text(t) == t for t in texts)
    assert core_terms.core_text('') == ''
    assert core_terms.core_text('anything the core says that is not listed') == \
        'anything the core says that is not listed'


def test_the_detail_panel_shows_core_texts_translated(chinese, qtbot):
    from ui.plan_compute import compute_plan, guidance_for
    from ui.plan_inputs import PlanInputs
    from ui.plots.memory_plot import MemoryPlot
    from ui.widgets.detail_panel import DetailPanel

    o = compute_plan(PlanInputs())
    c = o.candidates[0]
    panel, plot = DetailPanel(), MemoryPlot()
    qtbot.addWidget(panel)
    qtbot.addWidget(plot)
    panel.show_candidate(o.request, c, guidance_for(o, c))
    plot.set_memory(c.memory)
    assert _has_cjk(panel.warnings_label.text())
    assert all(_has_cjk(label) for label in plot.labels.values())
    assert panel.values['mem.total'].endswith(' GiB')  # numbers and units unchanged


def test_core_messages_are_translated_by_id_not_by_their_text(chinese, monkeypatch):
    """A core Message is looked up by its id (the app's copy of every template is the
    core's); no English sentence is pattern-matched on the way."""
    from planner.messages import MESSAGES, Message

    assert core_terms.MESSAGE_TEMPLATES == MESSAGES

    def no_matching(text):
        raise AssertionError(f'pattern-matched {text!r}')

    monkeypatch.setattr(core_terms, 'match_sentence', no_matching)
    note = Message('guidance.warmup_capped',
                   note='GPT-3 warmed up over 375M tokens (Brown et al. 2020)')
    shown = core_terms.core_text(note)
    assert _has_cjk(shown)
    assert core_terms.core_text('GPT-3 warmed up over 375M tokens (Brown et al. 2020)') in shown
    odd = Message('nvml.failed', reason='weird {text}: with; separators', fallback='x')
    assert _has_cjk(core_terms.core_text(odd))
    assert 'weird {text}: with; separators' in core_terms.core_text(odd)


def test_a_message_survives_copies_and_json():
    import copy
    import json

    from planner.messages import Message

    m = Message('guidance.below_critical', ratio='4.2')
    assert str(m) == ('global batch is 4.2x below the critical batch: more data-parallel '
                      'GPUs would still speed training up almost linearly')
    for twin in (copy.copy(m), copy.deepcopy(m)):
        assert twin == m
        assert (twin.id, twin.args) == (m.id, m.args)
    assert json.loads(json.dumps({'note': m})) == {'note': str(m)}
