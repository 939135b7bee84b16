"""`rkdet fleet deploy`: many boards, a matrix of cells, determinism classes, fleet reports (above deploy_command)."""
