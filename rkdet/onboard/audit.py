"""The audited runtime: `RKNNLite` with lite2's calling convention, recording every inference.

Drop-in: an app changes `from rknnlite.api import RKNNLite` to `from rkdet.onboard.audit import RKNNLite`
and passes an `AuditSettings` (or sets RKDET_AUDIT_DIR). Per inference one chained record (time, build
fingerprint, input hash, output hashes, core mask, latency; rkdet.onboard.audit_chain), the canary and
the shadow when configured (rkdet.onboard.audit_watch), and the Prometheus textfile
(rkdet.onboard.audit_prom). Nothing here may fail or block the inference: audit trouble is counted,
logged and shown in the metrics, and the app's outputs are returned as the runtime gave them.
"""

import hashlib
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from .audit_chain import DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_FILES, AuditChain
from .audit_prom import write_prom
from .audit_watch import Canary, Shadow
from .hashing import file_sha256, output_hash
from .identity import read_rknn_facts
from .numpy_or_none import np

try:
    import queue
except ImportError:  # pragma: no cover - Python 2 is not supported; keeps linters quiet
    queue = None  # type: ignore


class AuditSettings(object):
    """Where and how often: the log folder, its bounds, the textfile folder, the canary and the shadow."""

    def __init__(self, log_dir, prom_dir=None, max_file_bytes=DEFAULT_MAX_FILE_BYTES,
                 max_files=DEFAULT_MAX_FILES, fsync_every=0, prom_every=100, canary=None, shadow=None,
                 on_alarm=None, build=None, background=True, queue_size=256):
        # type: (str, Optional[str], int, int, int, int, Optional[Canary], Optional[Shadow], Optional[Callable[[str, Dict[str, Any]], None]], Optional[str], bool, int) -> None
        self.log_dir, self.prom_dir = log_dir, prom_dir
        self.max_file_bytes, self.max_files, self.fsync_every = max_file_bytes, max_files, fsync_every
        self.prom_every = max(1, int(prom_every))
        self.canary, self.shadow, self.on_alarm = canary, shadow, on_alarm
        self.build = build  # the build fingerprint; default: the one the .rknn carries, else its sha256
        # background: hash, append and shadow on a recorder thread (the app's thread only copies its
        # inputs and outputs); a full queue drops the record and counts it, like a full disk
        self.background, self.queue_size = bool(background), max(1, int(queue_size))

    @classmethod
    def from_environment(cls):
        # type: () -> AuditSettings
        folder = os.environ.get("RKDET_AUDIT_DIR")
        if not folder:
            raise ValueError("rkdet audit: no AuditSettings given and RKDET_AUDIT_DIR is not set")
        return cls(folder, prom_dir=os.environ.get("RKDET_AUDIT_PROM_DIR") or None)


def input_hash(inputs):
    # type: (List[Any]) -> str
    """One hash over every input: sha256 of each input's output-hash definition, in order."""
    digest = hashlib.sha256()
    for x in inputs:
        digest.update(output_hash(x).encode("ascii"))
    return digest.hexdigest()


def _default_runtime(**kwargs):
    # type: (**Any) -> Any
    from rknnlite.api import RKNNLite as Lite  # only on the board (aarch64)
    return Lite(**kwargs)


# lite2's core-mask constants (its values), and the names run.json uses for them (resultset.CORE_MASKS)
_CORE_MASKS = {0: "auto", 1: "0", 2: "1", 4: "2", 3: "0_1", 7: "0_1_2", 0xffff: "all"}


class RKNNLite(object):
    """lite2's RKNNLite (load_rknn, init_runtime, inference, release) with the audit around it."""

    NPU_CORE_AUTO, NPU_CORE_0, NPU_CORE_1, NPU_CORE_2 = 0, 1, 2, 4
    NPU_CORE_0_1, NPU_CORE_0_1_2, NPU_CORE_ALL = 3, 7, 0xffff

    def __init__(self, audit=None, runtime=None, **kwargs):
        # type: (Optional[AuditSettings], Any, **Any) -> None
        self.settings = audit or AuditSettings.from_environment()
        self.runtime = runtime if runtime is not None else _default_runtime(**kwargs)
        self.build = self.settings.build or ""
        self.core_mask = "auto"
        self.counters = {}  # type: Dict[str, float]
        self.chain = None  # type: Optional[AuditChain]
        self._served = 0
        self._alarms = {}  # type: Dict[str, int]
        self._lock = threading.Lock()  # the chain and the counters: the app's thread and the recorder's
        self._queue = None  # type: Any
        self._thread = None  # type: Optional[threading.Thread]
        self._since_canary = 0
        self._canary_at = time.time()

    # --- lite2's calling convention -------------------------------------------------------------
    def load_rknn(self, path):
        # type: (str) -> int
        ret = self.runtime.load_rknn(path)
        if not self.build:
            facts = read_rknn_facts(path)
            self.build = (facts or {}).get("embedded_fingerprint") or file_sha256(path)
        return ret

    def init_runtime(self, core_mask=None, **kwargs):
        # type: (Any, **Any) -> int
        if core_mask is not None:
            kwargs["core_mask"] = core_mask
            self.core_mask = _CORE_MASKS.get(core_mask, str(core_mask))
        ret = self.runtime.init_runtime(**kwargs)
        s = self.settings
        if s.prom_dir is not None and not os.path.isdir(s.prom_dir):
            os.makedirs(s.prom_dir)
        self.chain = AuditChain(s.log_dir, s.max_file_bytes, s.max_files, s.fsync_every)
        self.counters["rkdet_audit_chain_breaks_total"] = self.chain.chain_breaks
        self.chain.append("start", {"build": self.build, "core_mask": self.core_mask,
                                    "canary_baseline": s.canary.baseline_from if s.canary else None,
                                    "shadow": s.shadow.build if s.shadow else None})
        if s.canary is not None:
            self._run_canary()
        self._write_metrics()
        if s.background:
            self._queue = queue.Queue(maxsize=s.queue_size)
            self._thread = threading.Thread(target=self._recorder, name="rkdet-audit", daemon=True)
            self._thread.start()
        return ret

    def inference(self, inputs=None, **kwargs):
        # type: (Optional[List[Any]], **Any) -> Any
        start = time.perf_counter()
        outputs = self.runtime.inference(inputs=inputs, **kwargs)
        latency = time.perf_counter() - start
        try:
            if self._queue is not None:
                self._enqueue(inputs, outputs, latency)
            else:
                self._record(list(inputs or []), outputs, latency)
            self._maybe_canary()
        except Exception as err:  # the audit never fails the inference: say so instead
            self._count("rkdet_audit_log_write_failures_total")
            sys.stderr.write("rkdet audit: record lost (%s: %s)\n" % (err.__class__.__name__, err))
        return outputs

    def _enqueue(self, inputs, outputs, latency):
        # type: (Any, Any, float) -> None
        """Copies (the app may reuse its buffers) onto the recorder's queue; a full queue drops and counts."""
        job = ([np.array(x, copy=True) for x in (inputs or [])],
               None if outputs is None else [np.array(o, copy=True) for o in outputs], latency)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            with self._lock:
                if self.chain is not None:
                    self.chain.lost += 1  # the next record written says so (lost_before)
            self._count("rkdet_audit_log_write_failures_total")

    def _recorder(self):
        # type: () -> None
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                self._record(*job)
            except Exception as err:
                self._count("rkdet_audit_log_write_failures_total")
                sys.stderr.write("rkdet audit: record lost (%s: %s)\n" % (err.__class__.__name__, err))

    def release(self):
        # type: () -> None
        if self._thread is not None:  # drain: every queued record is written before the stop record
            self._queue.put(None)
            self._thread.join()
            self._thread, self._queue = None, None
        if self.chain is not None:
            if self.settings.shadow is not None and self.settings.shadow.samples:
                self._append("shadow", self.settings.shadow.summary())
            self._append("stop", {"served": self._served})
            self._write_metrics()
            self.chain.close()
            self.chain = None
        self.runtime.release()

    # --- the audit --------------------------------------------------------------------------------
    def _count(self, name, by=1):
        # type: (str, float) -> None
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + by

    def _append(self, kind, fields):
        # type: (str, Dict[str, Any]) -> bool
        with self._lock:
            assert self.chain is not None
            return self.chain.append(kind, fields)

    def _record(self, inputs, outputs, latency):
        # type: (List[Any], Any, float) -> None
        chain, s = self.chain, self.settings
        if chain is None:
            raise RuntimeError("inference before init_runtime")
        h0 = time.perf_counter()
        fields = {"build": self.build, "input": input_hash(inputs),
                  "outputs": [output_hash(o) for o in (outputs or [])],
                  "core_mask": self.core_mask, "latency_us": int(latency * 1e6)}
        self._count("rkdet_audit_hash_seconds_total", time.perf_counter() - h0)
        self._served += 1
        self._count("rkdet_audit_inferences_total")
        if not self._append("inference", fields):
            self._count("rkdet_audit_log_write_failures_total")
        if s.shadow is not None and outputs is not None and s.shadow.wants(self._served):
            self._count("rkdet_audit_shadow_samples_total")
            disagreement = s.shadow.compare(inputs, outputs)
            if disagreement is not None:
                self._count("rkdet_audit_shadow_disagreements_total")
                self._append("shadow_disagreement", dict(disagreement, input=fields["input"],
                                                         build=self.build, candidate=s.shadow.build))
                self._alarm("shadow_disagreement", disagreement)
            if s.shadow.period_due():
                self._append("shadow", s.shadow.summary())
        if self._served % s.prom_every == 0:
            self._write_metrics()

    def _maybe_canary(self):
        # type: () -> None
        """On the app's thread, between its inferences: the runtime is the app's, never shared across threads."""
        canary = self.settings.canary
        self._since_canary += 1
        if canary is not None and canary.due(self._since_canary, time.time() - self._canary_at):
            self._run_canary()

    def _run_canary(self):
        # type: () -> None
        canary, chain = self.settings.canary, self.chain
        assert canary is not None and chain is not None
        self._since_canary, self._canary_at = 0, time.time()
        fields = canary.check(lambda x: self.runtime.inference(inputs=x))
        self._count("rkdet_audit_canary_runs_total")
        self._append("canary", dict(fields, build=self.build, core_mask=self.core_mask))
        if not fields["ok"]:
            self._count("rkdet_audit_canary_failures_total")
            self._alarm("canary_failure", fields["first_difference"])
            self._write_metrics()

    def _alarm(self, what, details):
        # type: (str, Dict[str, Any]) -> None
        seen = self._alarms[what] = self._alarms.get(what, 0) + 1
        if seen <= 10 or seen % 1000 == 0:  # a bounded stderr: the log and the counters hold every one
            sys.stderr.write("rkdet audit: %s #%d %s\n" % (what, seen, details))
        if self.settings.on_alarm is not None:
            try:
                self.settings.on_alarm(what, details)
            except Exception:  # the app's callback must not fail its own inference either
                pass

    def _write_metrics(self):
        # type: () -> None
        if self.settings.prom_dir is None:
            return
        with self._lock:
            if self.chain is not None:
                self.counters["rkdet_audit_log_write_failures_total"] = max(
                    self.counters.get("rkdet_audit_log_write_failures_total", 0), self.chain.write_failures)
            values = dict(self.counters)
        write_prom(self.settings.prom_dir, values, self.build)
