"""What a board says: its scripts' output (probe, pin, restore), its lock, its software stack, the
known incompatibilities with a build, the preflight checks."""
