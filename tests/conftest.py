"""Root test configuration: shared fixtures (see tests/shared_build.py) and suite-wide guards
(tests/host_guard.py: this machine's real kernel knobs, read only, per module and per session)."""

pytest_plugins = ("shared_build", "host_guard")
