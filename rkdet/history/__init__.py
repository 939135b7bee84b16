"""The results database (<results>/rkdet.db): run folders ingested by board identity, build and cell;
baselines and drift ("the same output every day"); `rkdet history`."""
