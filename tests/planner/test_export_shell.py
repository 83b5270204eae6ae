"""Shell safety: every value quoted, control characters refused, nothing runs by itself."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from planner.errors import InputError
from planner.export import EXPORTERS, ExportOptions, export_plan
from planner.export.shell import check_text, comment, env_ref, quote
from planner.export.textfmt import scalar, toml_lines, yaml_lines
from planner.toml_compat import tomllib
from tests.export_helpers import make_plan, recorded_argv, renamed, run_script

HOSTILE = [
    'my train.py', "it's.py", 'a"b.py', '$HOME/x.py', '$(touch pwned).py', '`touch pwned`.py',
    'x.py; touch pwned', 'x.py && touch pwned', '*.py', '~/x.py', 'x\\y.py', '!x.py',
    'x.py # not a comment', "'; touch pwned; '", '${IFS}touch${IFS}pwned',
]
SCRIPT_FORMATS = ('torchrun', 'hf', 'accelerate', 'megatron', 'slurm')


@pytest.mark.parametrize('value', HOSTILE)
def test_quote_round_trips_through_bash(value, tmp_path):
    done = subprocess.run(['bash', '-c', f'printf "%s" {quote(value)}'], cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert done.stdout == value
    assert shlex.split(quote(value)) == [value]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize('value', ['a\nb', 'a\rb', 'a\x00b', 'tab\there', 'esc\x1b[31m'])
def test_control_characters_are_refused(value):
    with pytest.raises(InputError, match='control character'):
        check_text(value, '--script')
    with pytest.raises(InputError):
        ExportOptions(script=value)
    with pytest.raises(InputError):
        ExportOptions(script_args=('ok', value))


def test_comments_cannot_be_escaped():
    line = comment('model\nrm -rf ~\r')
    assert '\n' not in line
    assert '\r' not in line
    assert line.startswith('# ')


def test_env_ref_refuses_expansions():
    ref = env_ref('NODE_RANK', 'set NODE_RANK (0 to 3)')
    assert ref == '"${NODE_RANK:?set NODE_RANK (0 to 3)}"'
    for message in ('$(id)', '`id`', 'a}b', 'a"b', "it's", 'a\\b'):
        with pytest.raises(ValueError, match='unsafe'):
            env_ref('NODE_RANK', message)


@pytest.mark.parametrize('bad', ['-x.py', '--help', ''])
def test_script_cannot_become_a_launcher_option(bad):
    with pytest.raises(InputError, match='--script'):
        ExportOptions(script=bad)


@pytest.mark.parametrize('fmt', SCRIPT_FORMATS)
@pytest.mark.parametrize('value', HOSTILE[:10])
def test_hostile_script_args_and_model_arrive_verbatim(tmp_path, fmt, value):
    framework = 'megatron' if fmt == 'megatron' else 'hf'
    plan = renamed(make_plan(nodes=2, framework=framework, precision='bf16-mixed'), value)
    options = ExportOptions(script=value, script_args=(value, '--x'), master_addr='10.0.0.1')
    text = export_plan(plan, fmt, options).text
    run_script(text, tmp_path, {'NODE_RANK': '0', 'SLURM_JOB_ID': '1',
                                'SLURM_JOB_NODELIST': 'n[1-2]'})
    argv = recorded_argv(tmp_path, 'accelerate' if fmt == 'accelerate' else 'torchrun')
    assert value in argv
    assert argv[-2:] == [value, '--x']
    assert not list(tmp_path.glob('pwned*'))


@pytest.mark.parametrize('fmt', ['lightning', 'llamafactory', 'torchtitan', 'deepspeed'])
def test_config_formats_keep_hostile_names_as_data(fmt):
    name = 'evil\n"name": [1]\n$(touch pwned) \' ` ; # x'
    stack = {'torchtitan': 'torchtitan', 'deepspeed': 'hf-deepspeed'}.get(fmt, 'hf')
    plan = renamed(make_plan(nodes=1, zero=3, framework=stack), name)
    text = export_plan(plan, fmt, ExportOptions(script='a b.py')).text
    for line in text.splitlines():
        if 'evil' in line:  # only inside a quoted value or an escaped comment
            assert line.startswith('#') or ': "' in line or ' = "' in line, line
    if fmt == 'torchtitan':
        assert tomllib.loads(text)['job']['description'].startswith('batchfit plan: evil\n')
    if fmt == 'deepspeed':
        json.loads(text)


def test_yaml_and_toml_scalars():
    assert scalar(3e-4) == '0.0003'
    assert scalar(3e-05) == '3.0e-05'  # PyYAML reads 3e-05 as a string
    assert scalar(1e20) == '1.0e+20'
    assert scalar('no') == '"no"'
    assert scalar('null') == '"null"'
    assert scalar(True) == 'true'
    assert scalar(None) == 'null'
    assert scalar(3e-05, yaml=False) == '3e-05'
    lines = yaml_lines({'a': {'b': 'x: y', 'c': {}}, 'd': [1, 2]})
    assert lines == ['a:', '  b: "x: y"', '  c: {}', 'd: [1, 2]']
    assert tomllib.loads('\n'.join(toml_lines({'t': {'s': 'a"\\\n', 'f': 1e-05}}))) == {
        't': {'s': 'a"\\\n', 'f': 1e-05}}


def test_every_format_is_registered():
    assert set(EXPORTERS) == {'torchrun', 'accelerate', 'deepspeed', 'hf', 'megatron',
                              'lightning', 'torchtitan', 'llamafactory', 'slurm'}
