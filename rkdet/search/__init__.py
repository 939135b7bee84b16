"""`rkdet convert --search`: remedies that pass the fidelity gate (a documented, deterministic space of variants)."""
