"""gpumsg's own NVRTC kernels that the cuDNN handle runs where cuDNN has none or a slower one:
``layer_norm.py`` (layer, group and instance norm), ``gelu.py``, ``softmax.py`` (softmax over
contiguous rows), ``bn_infer.py`` (batch-norm inference), all on ``rowkern.py`` (the CUDA C++
pieces and host-side shape choices they share). Each compiles on first use.
"""
