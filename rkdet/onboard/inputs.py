"""A run's inputs: DIR/*.npy (one tensor each) or DIR/*.npz (one sample of several named tensors).

Why its own module: every input is loaded once, hashed, and checked against the model's inputs
before the first inference, so a wrong shape is one line (exit 2), never a runtime error mid-run.
"""

import glob
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .exits import RunnerError
from .hashing import file_sha256
from .numpy_or_none import np

class Sample(object):
    """One input sample: its name (file stem), file, file hash and tensors by input name."""

    def __init__(self, name, path, tensors, keyed):
        # type: (str, str, List[Tuple[str, Any]], bool) -> None
        self.name = name
        self.path = path
        self.tensors = tensors  # [(key, array)]; key is the npz key, or "" for a bare .npy
        self.keyed = keyed
        self.sha256 = file_sha256(path)
        self.feed = [a for _, a in tensors]  # reordered to the model's input order by validate

    def describe(self):
        # type: () -> Dict[str, Any]
        first = self.tensors[0][1]
        info = {"name": self.name, "file": os.path.basename(self.path), "sha256": self.sha256,
                "shape": [int(d) for d in first.shape], "dtype": first.dtype.name}
        if self.keyed:
            info["tensors"] = [{"name": k, "shape": [int(d) for d in a.shape], "dtype": a.dtype.name}
                               for k, a in self.tensors]
        return info


def load_inputs(input_dir):
    # type: (str) -> List[Sample]
    """The samples of an input folder, sorted by file name; one-line errors name the file."""
    if not os.path.isdir(input_dir):
        raise RunnerError("%s: inputs folder not found; pass --inputs DIR holding *.npy or *.npz" % input_dir)
    npy = sorted(glob.glob(os.path.join(input_dir, "*.npy")))
    npz = sorted(glob.glob(os.path.join(input_dir, "*.npz")))
    if npy and npz:
        raise RunnerError("%s: mixes .npy and .npz inputs; use *.npy for single-input models or *.npz for multi-input" % input_dir)
    if not npy and not npz:
        raise RunnerError("%s: no *.npy or *.npz inputs found" % input_dir)
    samples = []
    for path in npy or npz:
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            loaded = np.load(path, allow_pickle=False)
            if npz:
                with loaded:
                    tensors = [(k, np.ascontiguousarray(loaded[k])) for k in loaded.files]
                if not tensors:
                    raise ValueError("holds no arrays")
            else:
                tensors = [("", np.ascontiguousarray(loaded))]
        except (OSError, IOError, ValueError) as err:
            raise RunnerError("%s: not a readable numpy %s file (%s)" % (path, "npz" if npz else "npy", err))
        samples.append(Sample(name, path, tensors, keyed=bool(npz)))
    return samples


def _shape_matches(shape, expected):
    # type: (Sequence[int], Sequence[Any]) -> bool
    if len(shape) != len(expected):
        return False
    return all(not isinstance(e, int) or e <= 0 or e == s for s, e in zip(shape, expected))


def _fmt_shape(shape):
    # type: (Sequence[Any]) -> str
    return "(" + ",".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in shape) + ")"


def validate_inputs(samples, specs):
    # type: (List[Sample], Optional[List[Dict[str, Any]]]) -> None
    """Check every sample against the model's inputs and order its tensors as the model wants.

    specs: [{"name", "shape" (ints; <=0 or non-int = any), "dtype"}] or None when the runtime
    cannot tell (rknnlite without an io.json): then only consistency across samples is checked.
    """
    for sample in samples:
        if specs is None:
            continue
        if not sample.keyed:
            if len(specs) != 1:
                raise RunnerError("%s: the model has %d inputs (%s); give each sample as a .npz keyed by input name"
                                  % (sample.path, len(specs), ", ".join(s["name"] for s in specs)))
            by_name = {specs[0]["name"]: sample.tensors[0][1]}
        else:
            by_name = dict(sample.tensors)
            missing = [s["name"] for s in specs if s["name"] not in by_name]
            extra = [k for k in by_name if k not in set(s["name"] for s in specs)]
            if missing or extra:
                raise RunnerError("%s: keys %s do not match the model inputs %s"
                                  % (sample.path, sorted(by_name), [s["name"] for s in specs]))
        for spec in specs:
            arr = by_name[spec["name"]]
            if not _shape_matches(arr.shape, spec["shape"]) or (spec.get("dtype") and arr.dtype.name != spec["dtype"]):
                raise RunnerError("%s: input '%s' is %s %s but the model wants %s %s"
                                  % (sample.path, spec["name"], arr.dtype.name, _fmt_shape(arr.shape),
                                     spec.get("dtype") or "any", _fmt_shape(spec["shape"])))
        sample.feed = [by_name[s["name"]] for s in specs]
    first = samples[0]
    for sample in samples[1:]:
        a = [(k, x.shape, x.dtype) for k, x in first.tensors]
        b = [(k, x.shape, x.dtype) for k, x in sample.tensors]
        if a != b:
            raise RunnerError("%s: tensors %s differ from %s's %s; every sample must match the model"
                              % (sample.path, [(k, _fmt_shape(s), d.name) for k, s, d in b],
                                 first.name, [(k, _fmt_shape(s), d.name) for k, s, d in a]))
