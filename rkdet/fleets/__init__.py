"""Fleets: where boards come from (`sources`: Ansible inventories, ssh_config, labgrid places) and
`rkdet fleet deploy` over them (`run`: scheduler, matrix, determinism classes, reports)."""
