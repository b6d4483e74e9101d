"""torch.linalg through tg.lapack (LAPACKE/CBLAS of scipy-openblas32) and the compositions of
`frontend/linalg_compositions.py`: numerics against eager PyTorch (MKL's LAPACK) on batched,
broadcast, rectangular and empty matrices, run-time errors where eager raises, the evaluator
(constant folding) calling the same routines.

Tolerances: both sides are backward-stable LAPACK algorithms in the same precision, so the
results agree to a few ulps times the condition number; the matrices here are well conditioned
(random, or shifted to be positive-definite): 2e-6 relative in float32 and 1e-14 in float64
(observed on a Zen 3: 3.4e-7 and 8.0e-16; OpenBLAS picks other kernels on other CPUs). Singular and eigen vectors are compared up to a sign per
vector (LAPACK builds may choose either).
"""

from __future__ import annotations

import pytest
import torch

import tensor_graphs as tg

TOL = {torch.float32: 2e-6, torch.float64: 1e-14}


class Fn(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *args):
        return self.f(*args)


def _spd(*shape: int, dtype=torch.float32) -> torch.Tensor:
    a = torch.randn(*shape, dtype=dtype)
    return a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)


def _close(got, want, dtype) -> None:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = torch.as_tensor(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if not w.is_floating_point():
            assert torch.equal(g, w)
            continue
        scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
        assert float((g - w).abs().max() if w.numel() else 0.0) <= TOL[dtype] * scale


CASES = {
    "det": (torch.linalg.det, lambda d: (torch.randn(3, 4, 4, dtype=d),)),
    "slogdet": (torch.linalg.slogdet, lambda d: (torch.randn(2, 5, 5, dtype=d),)),
    "inv": (torch.linalg.inv, lambda d: (torch.randn(2, 4, 4, dtype=d),)),
    "solve_broadcast": (torch.linalg.solve, lambda d: (torch.randn(2, 4, 4, dtype=d), torch.randn(4, 3, dtype=d))),
    "solve_vector": (torch.linalg.solve, lambda d: (torch.randn(4, 4, dtype=d), torch.randn(4, dtype=d))),
    "solve_right": (lambda a, b: torch.linalg.solve(a, b, left=False), lambda d: (torch.randn(4, 4, dtype=d), torch.randn(2, 4, dtype=d))),
    "lu": (torch.linalg.lu, lambda d: (torch.randn(2, 5, 3, dtype=d),)),
    "lu_factor_wide": (torch.linalg.lu_factor, lambda d: (torch.randn(3, 5, dtype=d),)),
    "lu_solve_adjoint": (lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True),
                         lambda d: (torch.randn(4, 4, dtype=d), torch.randn(4, 2, dtype=d))),
    "cholesky_upper": (lambda a: torch.linalg.cholesky(a, upper=True), lambda d: (_spd(2, 4, 4, dtype=d),)),
    "cholesky_solve": (lambda b, a: torch.cholesky_solve(b, torch.linalg.cholesky(a).contiguous()),
                       lambda d: (torch.randn(4, 2, dtype=d), _spd(4, 4, dtype=d))),
    "cholesky_inverse": (lambda a: torch.cholesky_inverse(torch.linalg.cholesky(a)), lambda d: (_spd(3, 3, dtype=d),)),
    "solve_triangular_right_unit": (lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, left=False, unitriangular=True),
                                    lambda d: (torch.randn(4, 4, dtype=d), torch.randn(2, 3, 4, dtype=d))),
    "triangular_solve_transpose": (lambda b, a: torch.triangular_solve(b, a.triu() + 4 * torch.eye(4, dtype=a.dtype), transpose=True),
                                   lambda d: (torch.randn(4, 2, dtype=d), torch.randn(4, 4, dtype=d))),
    "qr_reduced": (torch.linalg.qr, lambda d: (torch.randn(2, 5, 3, dtype=d),)),
    "qr_complete": (lambda a: torch.linalg.qr(a, mode="complete"), lambda d: (torch.randn(5, 3, dtype=d),)),
    "qr_r_wide": (lambda a: torch.linalg.qr(a, mode="r")[1], lambda d: (torch.randn(3, 5, dtype=d),)),
    "ormqr": (lambda a, c: torch.ormqr(*torch.geqrf(a), c, left=False, transpose=True),
              lambda d: (torch.randn(4, 4, dtype=d), torch.randn(3, 4, dtype=d))),
    "svdvals": (torch.linalg.svdvals, lambda d: (torch.randn(2, 3, 6, dtype=d),)),
    "eigvalsh": (lambda a: torch.linalg.eigvalsh(a, UPLO="U"), lambda d: (_spd(2, 5, 5, dtype=d),)),
    "pinv": (torch.linalg.pinv, lambda d: (torch.randn(4, 6, dtype=d),)),
    "pinv_hermitian": (lambda a: torch.linalg.pinv(a, hermitian=True), lambda d: (_spd(4, 4, dtype=d),)),
    "matrix_rank": (torch.linalg.matrix_rank, lambda d: (torch.randn(5, 3, dtype=d) @ torch.randn(3, 5, dtype=d),)),
    "cond": (torch.linalg.cond, lambda d: (torch.randn(4, 4, dtype=d),)),
    "ldl_factor_and_solve": (lambda a, b: (*torch.linalg.ldl_factor(a), torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a), b)),
                             lambda d: ((lambda m: m + m.mT)(torch.randn(2, 5, 5, dtype=d)), torch.randn(2, 5, 2, dtype=d))),
    "matrix_exp": (torch.linalg.matrix_exp, lambda d: (torch.cat([torch.randn(2, 4, 4, dtype=d), 4 * torch.randn(1, 4, 4, dtype=d)]),)),
    "tensorinv": (lambda a: torch.linalg.tensorinv(a, ind=1), lambda d: (torch.randn(6, 2, 3, dtype=d),)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_linalg_matches_eager(name, dtype):
    torch.manual_seed(0)
    f, make = CASES[name]
    args = make(dtype)
    fn = tg.compile(Fn(f).eval(), args)
    _close(fn(*args), f(*args), dtype)


def _sign_aligned(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    signs = torch.sign((got * want).sum(-2, keepdim=True))
    return got * torch.where(signs == 0, 1, signs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_vectors_match_eager_up_to_sign(dtype):
    """svd's U and V (the same flips) and eigh's vectors, from either LAPACK build, agree up to
    the sign of each vector; U diag(S) Vh rebuilds the matrix."""
    torch.manual_seed(0)
    a, s = torch.randn(2, 5, 3, dtype=dtype), _spd(4, 4, dtype=dtype)
    fn = tg.compile(Fn(lambda a, s: (*torch.linalg.svd(a, full_matrices=False), *torch.linalg.eigh(s))).eval(), (a, s))
    u, sv, vh, w, v = (torch.as_tensor(x) for x in fn(a, s))
    eu, es, evh = torch.linalg.svd(a, full_matrices=False)
    ew, ev = torch.linalg.eigh(s)
    signs = torch.sign((u * eu).sum(-2))
    _close((u * signs.unsqueeze(-2), sv, vh * signs.unsqueeze(-1)), (eu, es, evh), dtype)
    _close((w, _sign_aligned(v, ev)), (ew, ev), dtype)
    _close(u @ torch.diag_embed(sv) @ vh, a, dtype)


def test_svd_of_empty_matrices_is_eagers():
    a = torch.zeros(2, 0, 3)
    for full in (True, False):
        fn = tg.compile(Fn(lambda a: torch.linalg.svd(a, full_matrices=full)).eval(), (a,))
        _close(tuple(fn(a)), tuple(torch.linalg.svd(a, full_matrices=full)), torch.float32)


@pytest.mark.parametrize("f, match", [
    (torch.linalg.inv, "torch.linalg.lu_factor_ex: the matrix is singular"),
    (lambda a: torch.linalg.solve(a, a[0]), "the matrix is singular"),
    (torch.linalg.cholesky, "torch.linalg.cholesky_ex: the matrix is not positive-definite"),
])
def test_a_singular_or_indefinite_matrix_is_a_run_time_error_as_in_eager(f, match):
    """Where eager raises (LinAlgError), the compiled graph raises at run time, naming it; the
    same graph gives eager's answer on a good matrix."""
    good = _spd(3, 3)
    fn = tg.compile(Fn(f).eval(), (good,))
    _close(fn(good), f(good), torch.float32)
    bad = torch.tensor([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, -1.0]])
    with pytest.raises(torch.linalg.LinAlgError):
        f(bad)
    with pytest.raises(RuntimeError, match=match):
        fn(bad)


def test_the_ex_variants_report_info_instead():
    """``inv_ex``/``cholesky_ex`` return LAPACK's info (the failing minor, 1-based) as eager does."""
    bad = torch.tensor([[[4.0, 2.0], [2.0, 1.0]], [[2.0, 0.0], [0.0, 3.0]]])
    f = lambda a: torch.linalg.cholesky_ex(a).info  # noqa: E731
    assert torch.equal(torch.as_tensor(tg.compile(Fn(f).eval(), (bad,))(bad)), f(bad))


def test_a_constant_matrix_folds_through_the_same_routines():
    """constant-fold evaluates tg.lapack on a constant (ctypes calls of the routine the graph
    would call): the graph keeps no tg.lapack, the result is eager's."""
    torch.manual_seed(0)

    class WithWeight(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("a", torch.randn(4, 4, dtype=torch.float64))

        def forward(self, x):
            return x @ torch.linalg.inv(self.a)

    m, x = WithWeight().eval(), torch.randn(2, 4, dtype=torch.float64)
    fn = tg.compile(m, (x,))
    _close(fn(x), m(x), torch.float64)


def test_the_gpu_path_refuses_lapack_by_name():
    """The GPU path has no linear-algebra kernels: it names buf.lapack."""
    x = torch.randn(3, 3)
    with pytest.raises(Exception, match="buf.lapack"):
        tg.compile(Fn(torch.linalg.det).eval(), (x,), device="cuda")
