"""Scaled dot-product (flash) attention through cuDNN's graph API: the library
``cudnn_attention`` (its graphs live beside, not inside, the convolution handle; its client
methods join ``dev.nn`` and ``dev.cudnn``). ``handle.py`` (the graph cache, device thread),
``handlers.py`` (message -> handle call, and the library's registration), ``sim.py`` (the
NumPy semantics of the simulator), ``client.py`` (the methods, caller's thread). Messages:
:mod:`gpumsg.messages.cudnn_attention`.
"""
