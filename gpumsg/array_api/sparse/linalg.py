"""Sparse linear algebra (``scipy.sparse.linalg``'s names)."""

from __future__ import annotations

__all__: list[str] = []
