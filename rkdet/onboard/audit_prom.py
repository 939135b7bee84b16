"""The serving counters in the node_exporter textfile convention (`<folder>/rkdet_audit.prom`).

Why a file: operators already run node_exporter with `--collector.textfile.directory`; a file written
with THE atomic writer is never read half-written by the collector.
"""

import os
from typing import Dict

from .atomic import write_atomic

PROM_FILE = "rkdet_audit.prom"
COUNTERS = (  # name, help: the counters docs/AUDIT.md and the alerting rules name
    ("rkdet_audit_inferences_total", "Inferences served through the audited runtime."),
    ("rkdet_audit_canary_runs_total", "Canary runs of the build's golden inputs."),
    ("rkdet_audit_canary_failures_total", "Canary runs whose outputs differ bitwise from the baseline."),
    ("rkdet_audit_shadow_samples_total", "Live inputs also run on the shadow (candidate) build."),
    ("rkdet_audit_shadow_disagreements_total", "Shadow samples whose decision differs from the served one."),
    ("rkdet_audit_chain_breaks_total", "Torn or unreadable records found when the audit log was resumed."),
    ("rkdet_audit_log_write_failures_total", "Audit records the disk refused (the inference still served)."),
    ("rkdet_audit_hash_seconds_total", "CPU seconds spent hashing inputs and outputs."),
)


def _label(value):
    # type: (str) -> str
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def render(values, build):
    # type: (Dict[str, float], str) -> str
    lines = []
    for name, text in COUNTERS:
        lines.append("# HELP %s %s" % (name, text))
        lines.append("# TYPE %s counter" % name)
        value = values.get(name, 0)
        shown = repr(float(value)) if isinstance(value, float) else str(int(value))
        lines.append('%s{build="%s"} %s' % (name, _label(build[:16]), shown))
    return "\n".join(lines) + "\n"


def write_prom(folder, values, build):
    # type: (str, Dict[str, float], str) -> bool
    """Write the textfile atomically; False (never raised) when the disk refuses."""
    try:
        write_atomic(os.path.join(folder, PROM_FILE), render(values, build), perms=0o644)
        return True
    except OSError:
        return False
