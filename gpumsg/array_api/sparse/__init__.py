"""Sparse matrices on a gpumsg device, in the spirit of ``scipy.sparse`` and
``cupyx.scipy.sparse``: ``csr_matrix``, ``csc_matrix`` and ``coo_matrix`` with their operators,
answering gpumsg arrays::

    import gpumsg.array_api as xp
    from gpumsg.array_api import sparse

    A = sparse.random(1000, 1000, density=0.01, format="csr", random_state=0)
    x = xp.ones(1000)
    y = A @ x                      # cuSPARSE SpMV: a gpumsg array
    B = (A + A.T) * 0.5            # sparse results, made on the device
    s = A.sum(axis=0)              # (1, 1000)
    z = sparse.linalg.spsolve(A + sparse.eye(1000) * 10, x)

Products are cuSPARSE's (SpMV, SpMM, SpGEMM), format conversions cuSPARSE's (CSR <-> CSC) and the
array layer's (sorting, searching, compaction); see each module.
"""

from __future__ import annotations

from . import linalg
from ._base import SparseMatrix, issparse
from ._compressed import csc_matrix, csr_matrix, isspmatrix_csc, isspmatrix_csr
from ._construct import diags, eye, identity, rand, random
from ._coo import coo_matrix, isspmatrix_coo

spmatrix = SparseMatrix

__all__ = ["SparseMatrix", "spmatrix", "csr_matrix", "csc_matrix", "coo_matrix", "issparse",
           "isspmatrix_csr", "isspmatrix_csc", "isspmatrix_coo", "eye", "identity", "random",
           "rand", "diags", "linalg"]
