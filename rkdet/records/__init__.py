"""rkdet's own records on disk: `io.py` is the one bounded reader (JSON, JSON Lines) and the one
"may I write here" check of every file rkdet reads or writes on the host."""
