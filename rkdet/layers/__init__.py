"""`rkdet layers`: which layer of a quantized build loses the precision (simulator vs float, per layer)."""
