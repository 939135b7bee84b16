"""The backends rkdet can run a build with, as descriptors (one module each, one registry: registry.py)."""
