"""llm-analysis's peak for configurations given on stdin, run in llm-analysis's own venv.

llm-analysis pins an older transformers than batchfit's tests use, so it lives in its own
environment (``make bench`` builds ``.venv-bench``; numpy and llm-analysis are all this
script needs). Input: a JSON list of ``{"case", "spec", "setup"}`` (``ModelSpec`` and
``TrainingSetup`` fields, as ``benchmarks/memory_ground_truth.py`` writes them). Output: a
JSON object, case id -> llm-analysis's ``(weight+op_state+grad+act)_memory_per_gpu`` in
bytes, mapped as ``benchmarks/memory_accuracy.py`` documents.
"""

from __future__ import annotations

import json
import sys

from benchmarks.memory_accuracy import PEAK_FIELD, llm_analysis_run
from planner.memory.training import TrainingSetup
from planner.models.spec import ModelSpec, MoESpec


def main() -> int:
    out = {}
    for item in json.load(sys.stdin):
        spec = dict(item['spec'])
        moe = spec.pop('moe', None)
        model = ModelSpec(**spec, moe=None if moe is None else MoESpec(**moe))
        setup = dict(item['setup'])
        setup.pop('lora', None)
        setup = TrainingSetup(**setup)
        out[item['case']] = float(llm_analysis_run(model, setup)[PEAK_FIELD])
    json.dump(out, sys.stdout)
    return 0


if __name__ == '__main__':
    sys.exit(main())
