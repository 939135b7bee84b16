"""Hashing, keeping and indexing each inference's outputs off the measured path (rkdet-run's Recorder).

Why its own module: the measured loop times only the runtime call; this worker thread does the rest,
in order, with bounded memory, so a slow SD card or a large output never shows in the latency.
"""

import queue
import threading
from typing import Any, Dict, List, Optional, Tuple

from .hashing import output_hash, same_bytes
from .resultset import Summary, index_record, output_record

LAST_OUTPUTS_BYTES = 64 << 20  # memory for the last outputs of each input (Recorder compares with them)


class Recorder(object):
    """Hashes, keeps and indexes each inference's outputs on a worker thread, in submission order,
    while the main thread already runs the next inference.

    Why: hashing a few MB of outputs costs about as much as 2-3 % of a YOLOv8n inference; the
    runtime call releases the GIL (and on a board mostly waits for the NPU), so on a second core
    that work is off the measured path. At most `depth` inferences are in flight: a SIGKILL loses
    only those (never a half record), and memory stays bounded. A worker error (ENOSPC) is raised
    in the main thread at the next submit() or at finish().

    Most runs repeat the previous output of the same input, so each output is first compared with
    that input's last one (same_bytes); only outputs that differ are hashed, and equal ones reuse the
    hash (and file) already recorded. The last outputs are kept for as many inputs as fit in
    `last_bytes`; inputs beyond it are hashed every time, as before.
    """

    def __init__(self, writer, backend_name, depth=2, last_bytes=LAST_OUTPUTS_BYTES):
        # type: (ResultWriter, str, int, int) -> None
        self.summary = Summary(backend_name)
        self._writer = writer
        self._backend = backend_name
        self._last = {}  # type: Dict[str, List[Tuple[Any, str]]]  # input -> [(array, hash)] of its last run
        self._last_room = last_bytes
        self._queue = queue.Queue(maxsize=depth)  # type: Any
        self._error = None  # type: Optional[BaseException]
        self._thread = threading.Thread(target=self._work, name="rkdet-record")
        self._thread.daemon = True
        self._thread.start()

    def _work(self):
        # type: () -> None
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:  # after a failure keep draining so submit() never blocks
                try:
                    self._record(*item)
                except BaseException as err:
                    self._error = err

    def _record(self, run, sample, latency, t_unix, names, outputs):
        # type: (int, str, float, float, List[str], List[Any]) -> None
        described = []
        last = self._last.get(sample) or []
        hashed = []  # type: List[Tuple[Any, str]]
        for i, (name, array) in enumerate(zip(names, outputs)):
            if i < len(last) and same_bytes(array, last[i][0]):
                digest = last[i][1]  # recorded (and its file kept) for an earlier run of this input
            else:
                digest = output_hash(array)
                self._writer.keep_output(digest, array)  # the file exists before the line naming it
            hashed.append((array, digest))
            described.append(output_record(name, digest, array))
        self._remember(sample, hashed)
        line = index_record(run, sample, round(latency * 1000.0, 4), t_unix, self._backend, described)
        self._writer.index.append(line)
        self.summary.add(line)

    def _remember(self, sample, hashed):
        # type: (str, List[Tuple[Any, str]]) -> None
        """Keep these outputs as the input's last ones (in place of its previous ones) if they fit."""
        self._last_room += sum(a.nbytes for a, _ in self._last.pop(sample, ()))
        size = sum(a.nbytes for a, _ in hashed)
        if size <= self._last_room:
            self._last[sample] = hashed
            self._last_room -= size

    def _raise_pending(self):
        # type: () -> None
        if self._error is not None:
            raise self._error

    def submit(self, run, sample, latency, t_unix, names, outputs):
        # type: (int, str, float, float, List[str], List[Any]) -> None
        self._raise_pending()
        self._queue.put((run, sample, latency, t_unix, names, outputs))

    def finish(self):
        # type: () -> Dict[str, Any]
        """Wait until every submitted inference is recorded; raise the worker's error if any."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_pending()
        return self.summary.result()
