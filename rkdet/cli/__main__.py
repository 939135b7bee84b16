"""`python -m rkdet.cli`: the same command line as `rkdet` (tests run it with the interpreter under test)."""

from rkdet.cli import main

main()
