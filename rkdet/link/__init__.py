"""The link to a board: how rkdet reaches it (target, host keys, SSH) and what it can do over any
`CommandRunner` (one remote command line, detached jobs, verified transfer and pull)."""
