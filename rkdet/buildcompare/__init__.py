"""`rkdet compare-builds A B`: two build folders (e.g. one config under two toolkits) compared, model content
section by section, then their golden outputs (docs/UPGRADE.md)."""
