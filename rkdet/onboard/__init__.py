"""The on-board program: what runs on the board, as a small package (docs/ARCHITECTURE.md, "onboard").

Python 3.6+ (RV1126 boards ship the legacy armhf RKNN Toolkit Lite v1 on Python 3.6/3.7): no
dataclasses, no postponed annotations, no walrus; the standard library, numpy and the runtime of the
chosen backend only; its modules import each other relatively and nothing else of rkdet. A board gets
it as ONE file, the zipapp `rkdet-onboard.pyz` (program.py builds it), run as
`python3 rkdet-onboard.pyz run ...` (rkdet-run) or `... selfcheck ...` (rkdet-selfcheck).

The host imports its small modules (hashing, atomic via rkdet.records.io, resultset, identity,
reference, bundle), never the whole program.
"""
