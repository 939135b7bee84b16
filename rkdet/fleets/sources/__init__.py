"""Fleet mode: many boards. Today: where the boards come from (inventory.py, patterns.py) and
`rkdet fleet hosts`; `rkdet fleet deploy` (issue 15) will consume the same `FleetBoard` records."""
