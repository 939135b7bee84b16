"""rkdet's own records on disk: one typed record per stage file (`manifest.py`: Manifest, `run_info.py`:
RunInfo, `build.py`: BuildRecord, a build folder loaded once, and the board side's BuildInfo,
`model_io.py`: ModelIo, `resolved_config.py`: ResolvedConfig, `fidelity.py`: FidelityRecord, `gates.py`:
GateRecord), each with one reader, and
`io.py`: the one bounded reader (JSON, JSON Lines), the one atomic writer (re-exported), the one folder
swap and the one "may I write here" check of every file rkdet reads or writes on the host."""
