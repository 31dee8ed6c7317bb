"""Recurrent networks (RNN, LSTM, GRU) through cuDNN's v8 RNN API: the library ``cudnn_rnn``
(registered in :mod:`gpumsg.libs.cudnn`), its descriptor caches on the device's cuDNN handle,
its client methods in ``dev.cudnn``. ``handle.py`` (device thread), ``handlers.py`` (message ->
handle call), ``sim.py`` (the NumPy semantics of the simulator), ``client.py`` (``dev.cudnn.rnn``
and its network objects, caller's thread). Messages: :mod:`gpumsg.messages.cudnn_rnn`.
"""

from ._client import Rnn, RnnDataGrads, RnnForwardFuture, RnnGrads, RnnOutputs

__all__ = ["Rnn", "RnnDataGrads", "RnnForwardFuture", "RnnGrads", "RnnOutputs"]
