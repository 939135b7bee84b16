"""rkdet: deterministic, provable AI inference on Rockchip NPUs."""

__version__ = "0.1.0"
