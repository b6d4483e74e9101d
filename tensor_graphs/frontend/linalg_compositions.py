"""``torch.linalg`` composed of the ops that are one LAPACK routine each (`tg.lapack`:
``linalg_lu_factor_ex``, ``linalg_lu_solve``, ``linalg_cholesky_ex``, ``geqrf``,
``linalg_householder_product``, ``_linalg_eigh``, ``_linalg_svd``, ``linalg_solve_triangular``),
as torch's own CPU kernels compose them. Entries of `compositions.compositions` (the last resort
after PyTorch's tables), checked against eager by ``tests/test_linalg.py``.

The ops that raise in eager on a singular or indefinite matrix (``linalg.inv``, ``solve``,
``cholesky``, ``lu_factor``) call the factorization with ``check_errors=True``: the compiled
graph raises at run time there too (where torch's own composition would record a side effect,
``_linalg_check_errors``, that a graph cannot hold).

=============================  ===============================================================
op                             composition
=============================  ===============================================================
``_linalg_det``                LU: the diagonal's product, the sign of the row swaps
``_linalg_slogdet``            LU: the sign, and the sum of log |diagonal|
``linalg_inv(_ex)``            LU, then solve against the identity
``linalg_tensorinv``           ``linalg_inv`` of the matrix view
``_linalg_solve_ex``,          LU, then ``linalg_lu_solve`` (a vector right-hand side as a
``linalg_solve``               one-column matrix)
``linalg_lu_factor``           ``linalg_lu_factor_ex``, checked
``linalg_ldl_factor``          ``linalg_ldl_factor_ex``, checked
``linalg_lu``, ``lu_unpack``   L and U from the triangles; P from the row swaps applied in order
``linalg_cholesky``,           ``linalg_cholesky_ex``, checked
``cholesky``
``cholesky_solve``,            two triangular solves (against the identity for the inverse)
``cholesky_inverse``
``triangular_solve``           ``linalg_solve_triangular`` (the old argument order)
``linalg_qr``                  geqrf, then the Householder product (Q) and the upper triangle (R)
``linalg_pinv``                the SVD (``eigh`` when hermitian), small singular values cut
``linalg_matrix_exp``          scaling and squaring of the degree-18 Taylor polynomial, float64
=============================  ===============================================================
"""

from __future__ import annotations

import math
from typing import Any

import torch

aten = torch.ops.aten


def _eye_like(A: torch.Tensor, n: int) -> torch.Tensor:
    return torch.eye(n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], n, n)


def _swap_parity(pivots: torch.Tensor) -> torch.Tensor:
    """+1 or -1 per problem: the parity of LAPACK's row swaps (1-based ``pivots``)."""
    k = pivots.shape[-1]
    swaps = (pivots != torch.arange(1, k + 1, dtype=pivots.dtype, device=pivots.device)).sum(-1)
    return 1 - 2 * (swaps % 2)


def _det(A):
    """``_linalg_det``: ``det = prod(diag(U)) * (-1)^swaps``; also returns LU and pivots."""
    LU, pivots, _ = aten.linalg_lu_factor_ex(A)
    diag = LU.diagonal(dim1=-2, dim2=-1)
    return diag.prod(-1) * _swap_parity(pivots).to(A.dtype), LU, pivots


def _slogdet(A):
    """``_linalg_slogdet``: the sign (0 for a singular matrix) and ``sum log |diag(U)|``."""
    LU, pivots, _ = aten.linalg_lu_factor_ex(A)
    diag = LU.diagonal(dim1=-2, dim2=-1)
    sign = torch.sign(diag).prod(-1) * _swap_parity(pivots).to(A.dtype)
    return sign, diag.abs().log().sum(-1), LU, pivots


def _inv_ex(A, *, check_errors=False):
    LU, pivots, info = aten.linalg_lu_factor_ex(A, check_errors=check_errors)
    return aten.linalg_lu_solve(LU, pivots, _eye_like(A, A.shape[-1])), info


def _inv(A):
    return _inv_ex(A, check_errors=True)[0]


def _is_vector_rhs(A: torch.Tensor, B: torch.Tensor) -> bool:
    """torch's ``linalg_solve_is_vector_rhs``: ``B`` is a vector (or a batch of them)."""
    return B.dim() == 1 or (A.dim() - 1 == B.dim() and tuple(B.shape) == tuple(A.shape[:-1]))


def _tensorinv(A, ind=2):
    """``linalg_tensorinv``: the inverse of ``A`` seen as a matrix of its first ``ind`` dims by the rest."""
    rows = A.shape[:ind]
    inverse = _inv(A.reshape(math.prod(rows), -1))
    return inverse.reshape(*A.shape[ind:], *rows)


def _solve_ex(A, B, *, left=True, check_errors=False):
    """``_linalg_solve_ex``: ``(result, LU, pivots, info)``."""
    LU, pivots, info = aten.linalg_lu_factor_ex(A, check_errors=check_errors)
    if _is_vector_rhs(A, B):
        dim = -1 if left else -2
        x = aten.linalg_lu_solve(LU, pivots, B.unsqueeze(dim), left=left).squeeze(dim)
    else:
        x = aten.linalg_lu_solve(LU, pivots, B, left=left)
    return x, LU, pivots, info


def _solve(A, B, *, left=True):
    return _solve_ex(A, B, left=left, check_errors=True)[0]


def _lu_factor(A, *, pivot=True):
    LU, pivots, _ = aten.linalg_lu_factor_ex(A, pivot=pivot, check_errors=True)
    return LU, pivots


def _permutation(pivots: torch.Tensor, m: int, dtype: torch.dtype) -> torch.Tensor:
    """P of ``A = P L U`` from LAPACK's row swaps: ``perm`` (row ``i`` of ``L U`` is row
    ``perm[i]`` of A) built by applying the swaps in order, then ``P[perm[i], i] = 1``."""
    perm = torch.arange(m, device=pivots.device).expand(*pivots.shape[:-1], m).clone()
    for i in range(pivots.shape[-1]):
        j = (pivots[..., i : i + 1] - 1).long()
        at_i, at_j = perm[..., i : i + 1].clone(), perm.gather(-1, j)
        perm = perm.scatter(-1, j, at_i)
        perm = torch.cat([perm[..., :i], at_j, perm[..., i + 1 :]], dim=-1)
    rows = torch.arange(m, device=pivots.device).unsqueeze(-1)
    return (rows == perm.unsqueeze(-2)).to(dtype)


def _lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``lu_unpack``: ``(P, L, U)``; what is not unpacked is an empty tensor, as torch's."""
    m, n = LU_data.shape[-2:]
    k = min(m, n)
    empty = LU_data.new_zeros((0,))
    if unpack_data:
        L = LU_data[..., :, :k].tril(-1) + torch.eye(m, k, dtype=LU_data.dtype, device=LU_data.device)
        U = LU_data[..., :k, :].triu()
    else:
        L = U = empty
    P = _permutation(LU_pivots, m, LU_data.dtype) if unpack_pivots else empty
    return P, L, U


def _ldl_factor(A, *, hermitian=False):
    LD, pivots, _ = aten.linalg_ldl_factor_ex(A, hermitian=hermitian, check_errors=True)
    return LD, pivots


def _lu(A, *, pivot=True):
    LU, pivots, _ = aten.linalg_lu_factor_ex(A, pivot=pivot)
    return _lu_unpack(LU, pivots)


def _cholesky(A, *, upper=False):
    return aten.linalg_cholesky_ex(A, upper=upper, check_errors=True)[0]


def _cholesky_old(A, upper=False):
    return _cholesky(A, upper=upper)


def _cholesky_solve(B, L, upper=False):
    """``A X = B`` with ``A = L L^T`` (``U^T U`` when ``upper``): two triangular solves."""
    if upper:
        y = aten.linalg_solve_triangular(L.mT, B, upper=False)
        return aten.linalg_solve_triangular(L, y, upper=True)
    y = aten.linalg_solve_triangular(L, B, upper=False)
    return aten.linalg_solve_triangular(L.mT, y, upper=True)


def _cholesky_inverse(L, upper=False):
    return _cholesky_solve(_eye_like(L, L.shape[-1]), L, upper)


def _triangular_solve(B, A, upper=True, transpose=False, unitriangular=False):
    """``triangular_solve``: ``(X, A.clone())`` with ``op(A) X = B`` (the batch dims broadcast)."""
    coefficient = A.mT if transpose else A
    x = aten.linalg_solve_triangular(coefficient, B, upper=upper != transpose, unitriangular=unitriangular)
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    return x, A.expand(*batch, *A.shape[-2:]).clone()


def _qr(A, mode="reduced"):
    """``linalg_qr``: geqrf, then Q = the Householder product of the first k columns (all m,
    zero-padded, for ``complete``) and R = the upper triangle of the first k rows (all, for
    ``complete``); ``r`` gives an empty Q."""
    m, n = A.shape[-2:]
    k = min(m, n)
    a, tau = aten.geqrf(A)
    if mode == "r":
        return A.new_zeros((0,)), a[..., :k, :].triu()
    if mode == "complete":
        if m > n:
            pad = a.new_zeros((*a.shape[:-1], m - n))
            return aten.linalg_householder_product(torch.cat([a, pad], -1), tau), a.triu()
        return aten.linalg_householder_product(a[..., :, :m], tau), a.triu()
    return aten.linalg_householder_product(a[..., :, :k], tau), a[..., :k, :].triu()


def _pinv(A, atol=None, rtol=None, hermitian=False):
    """``linalg_pinv.atol_rtol_tensor``, as torch's: singular values (|eigenvalues|) at most
    ``max(atol, rtol * largest)`` are dropped; rtol defaults to ``eps * max(m, n)`` unless a
    positive atol is given."""
    m, n = A.shape[-2:]
    real = A.dtype
    atol_t = atol if atol is not None else torch.zeros((), dtype=real)
    default_rtol = torch.full((), torch.finfo(real).eps * max(m, n), dtype=real)
    if rtol is None:
        rtol_t = torch.where(atol_t > 0, torch.zeros((), dtype=real), default_rtol) if atol is not None else default_rtol
    else:
        rtol_t = rtol
    if hermitian:
        S, U = aten._linalg_eigh(A)
        s_abs = S.abs()
        tol = torch.maximum(atol_t.unsqueeze(-1), rtol_t.unsqueeze(-1) * s_abs.amax(-1, keepdim=True))
        inverse = torch.where(s_abs > tol, S.reciprocal(), torch.zeros((), dtype=real))
        return (U * inverse.unsqueeze(-2)) @ U.mT
    U, S, Vh = aten._linalg_svd(A)
    tol = torch.maximum(atol_t.unsqueeze(-1), rtol_t.unsqueeze(-1) * S[..., :1])
    inverse = torch.where(S > tol, S.reciprocal(), torch.zeros((), dtype=real))
    return (Vh.mT * inverse.unsqueeze(-2)) @ U.mT


#: matrix_exp's most squarings: a 1-norm up to 2^40 (beyond, exp overflows float64 anyway)
_MAX_SQUARINGS = 40


def _matrix_exp(A):
    """``linalg_matrix_exp`` in float64, rounded once: each matrix scaled by ``2^-s`` to a 1-norm
    of at most 1/2, the degree-18 Taylor polynomial (Horner), then squared ``s`` times (a fixed
    count of products, each kept where it is one of that matrix's ``s``). float16/bfloat16 stay
    refused: eager computes them in their own precision and overflows to NaN where this would not."""
    if A.dtype in (torch.float16, torch.bfloat16):
        return NotImplemented
    x = A.to(torch.float64)
    n = x.shape[-1]
    norm = x.abs().sum(-2).amax(-1)
    s = torch.clamp(torch.ceil(torch.log2(norm / 0.5)), 0, _MAX_SQUARINGS)
    x = x * torch.pow(2.0, -s)[..., None, None]
    eye = torch.eye(n, dtype=torch.float64).expand(x.shape)
    e = eye
    for k in range(18, 0, -1):
        e = eye + (x @ e) / k
    for i in range(_MAX_SQUARINGS):
        e = torch.where((s > i)[..., None, None], e @ e, e)
    return e.to(A.dtype)


#: aten overload name -> composition
LINALG_COMPOSITIONS: dict[str, Any] = {
    "_linalg_det.default": _det,
    "_linalg_slogdet.default": _slogdet,
    "linalg_inv_ex.default": _inv_ex,
    "linalg_inv.default": _inv,
    "linalg_tensorinv.default": _tensorinv,
    "_linalg_solve_ex.default": _solve_ex,
    "linalg_solve.default": _solve,
    "linalg_lu_factor.default": _lu_factor,
    "linalg_lu.default": _lu,
    "linalg_ldl_factor.default": _ldl_factor,
    "lu_unpack.default": _lu_unpack,
    "linalg_cholesky.default": _cholesky,
    "cholesky.default": _cholesky_old,
    "cholesky_solve.default": _cholesky_solve,
    "cholesky_inverse.default": _cholesky_inverse,
    "triangular_solve.default": _triangular_solve,
    "linalg_qr.default": _qr,
    "linalg_pinv.atol_rtol_tensor": _pinv,
    "linalg_matrix_exp.default": _matrix_exp,
}
