"""The device thread's side: the loop (``worker``), the registry of handlers and libraries,
the envelope and stream tracking (``context``), completion threads, device-message handlers,
plan caches, result scratch, state, stats and trace hooks. Imports no library: libraries
register themselves (``registry``)."""
