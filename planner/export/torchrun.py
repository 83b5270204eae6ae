"""``torchrun`` launch script: processes and rendezvous; the plan's numbers as variables.

A plain script has its own flag names, so the layout (TP, PP, CP, DP, ZeRO, recompute),
the batch, learning rate and warmup go to it as ``BATCHFIT_*`` environment variables
(docs/export.md; and any ``--`` arguments given to export).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.export.base import Export, ExportOptions, header, liger_notes, lora_notes
from planner.export.launch import (
    SCRIPT_READS,
    bash_script,
    exports,
    launch_line,
    multi_node_notes,
    plan_variables,
    script_words,
    torchrun_words,
)

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """The torchrun script."""
    notes = multi_node_notes(n, options)
    notes.append(f'torchrun starts the processes; {SCRIPT_READS}')
    notes += lora_notes(plan) + liger_notes(plan)
    words = torchrun_words(n, options) + script_words(options.script_or('train.py'),
                                                      options.script_args)
    body = [*exports(plan_variables(plan, n)), launch_line(words)]
    return Export(bash_script(header(plan, n, 'torchrun'), notes, body), 'launch_torchrun.sh',
                  tuple(notes))
