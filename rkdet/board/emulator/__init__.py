"""The emulated board: kernel-like sysfs/procfs (FUSE or plain tree), sshd, runtime double."""
