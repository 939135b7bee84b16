"""`rkdet accuracy BUILD --labels …`: a build's accuracy against ground-truth labels (docs/ACCURACY.md).

One job per module: `labels.py` reads the labels (COCO JSON, class folders or CSV, PNG label maps),
`inputs.py` the build's models and the images fed as the build is fed, `runs.py` each variant's outputs
(FP32, the INT8 emulation, a board's pulled results), `metrics.py` each task's metric, `table.py` the
deltas and MLPerf's 99 % / 99.9 % lines, `measure.py` composes them into the `accuracy.json` record.
"""
