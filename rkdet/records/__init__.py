"""rkdet's own records on disk: one typed record per stage file (`manifest.py`: Manifest, `run_info.py`:
RunInfo, `build.py`: the board side's BuildInfo, `gates.py`: GateRecord), each with one reader, and
`io.py`: the one bounded reader (JSON, JSON Lines), the one atomic writer (re-exported), the one folder
swap and the one "may I write here" check of every file rkdet reads or writes on the host."""
