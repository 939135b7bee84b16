"""`--contexts N`: several runtime contexts in threads on the same inputs, against the sequential run.

Why its own module: a runtime that is deterministic run after run may still differ when contexts run
concurrently (rknn-toolkit2 #474); this check opens N backends (`open_backend`, run.py's), runs every
input once on each at the same time, and records each difference in contexts.json.
"""

import threading
from typing import Any, Callable, Dict, List, Tuple

from .exits import RunnerError, check_stop
from .hashing import output_hash
from .resultset import CONTEXTS_SCHEMA


def contexts_check(args, mask, samples, reference, open_backend):
    # type: (Any, str, List[Any], Dict[str, List[Tuple[str, str]]], Callable[[Any, str], Any]) -> Dict[str, Any]
    """`--contexts N`: N runtime contexts (one backend each), one thread each, every input once, all at
    the same time; each output compared with the sequential run's first (rknn-toolkit2 #474)."""
    backends = []
    try:
        for _ in range(args.contexts):
            backends.append(open_backend(args, mask))
        results = [None] * len(backends)  # type: List[Any]

        def work(index):
            # type: (int) -> None
            got = {}
            try:
                for sample in samples:
                    outputs = backends[index].own(backends[index].infer(sample.feed))
                    got[sample.name] = [output_hash(o) for o in outputs]
                results[index] = got
            except BaseException as err:  # reported below, in the main thread
                results[index] = err

        threads = [threading.Thread(target=work, args=(i,), name="rkdet-context-%d" % i) for i in range(len(backends))]
        for thread in threads:
            thread.daemon = True
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(1.0)
                check_stop()
    finally:
        for backend in backends:
            backend.close()
    doc = {"schema": CONTEXTS_SCHEMA, "contexts": args.contexts, "core_mask": mask, "agree": True,
           "differences": []}  # type: Dict[str, Any]
    for index, got in enumerate(results):
        if isinstance(got, BaseException):
            if isinstance(got, RunnerError):
                raise RunnerError("context %d of %d: %s" % (index, args.contexts, got), got.exit_code)
            raise got
        for sample in samples:
            expected = reference.get(sample.name) or []
            for (name, want), have in zip(expected, got[sample.name]):
                if want != have:
                    doc["agree"] = False
                    doc["differences"].append({"context": index, "input": sample.name, "output": name,
                                               "sequential": want, "threaded": have})
                    break
    return doc

