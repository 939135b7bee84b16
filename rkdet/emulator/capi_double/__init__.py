"""rkdet's test double of Rockchip's C runtime (tests and the emulated board only): rkdet's own ABI
declarations (rknn_api.h), the double library (rknnrt_double.c) and the emulated board's launcher that
runs a native runner under qemu-user over it (board_exec.py)."""
