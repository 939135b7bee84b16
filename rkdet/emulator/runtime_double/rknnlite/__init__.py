"""rkdet's TEST DOUBLE of the rknnlite package: onnxruntime on the CPU, not an NPU (see api/)."""

RKDET_EMULATED = "rkdet emulated RKNNLite: onnxruntime on CPU, not an NPU"
__version__ = "2.5.0+rkdet.emulated"
