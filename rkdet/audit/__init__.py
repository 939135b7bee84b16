"""The host side of the serving audit (docs/AUDIT.md): pull, verify, report a board's audit log."""
