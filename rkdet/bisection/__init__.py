"""`rkdet layers BUILD --board H`: bisection on the board, to the first tensor where it departs from its reference."""
