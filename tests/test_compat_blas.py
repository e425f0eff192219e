"""compclip.compat.blas: scipy's ssyrk through ctypes and numpy's fallback give the same triangle,
the version fence picks the fallback outside the checked scipy versions, and the shared
`ctypes.pythonapi` functions are left as they were."""
import ctypes

import numpy as np
import pytest

from compclip.compat import blas


def lower(out):
    return out[np.tri(len(out), dtype=bool)]


@pytest.mark.parametrize("m, d", [(1, 3), (37, 12), (300, 64)])
def test_patched_and_fallback_give_the_same_triangle(m, d):
    patched = blas.scipy_ssyrk()
    assert patched is not None  # scipy comes with scikit-learn
    rng = np.random.default_rng(m)
    exact = rng.integers(-8, 9, (m, d)).astype(np.float32)  # integer data: every product exact
    real = rng.standard_normal((m, d)).astype(np.float32)
    for x in (exact, real):
        outs = []
        for syrk in (patched, blas.numpy_syrk):
            out = np.triu(np.full((m, m), np.nan, np.float32), 1)
            syrk(x, out)
            assert np.isnan(out[np.triu_indices(m, 1)]).all()  # the strict upper triangle untouched
            outs.append(out)
        if x is exact:
            np.testing.assert_array_equal(lower(outs[0]), lower(outs[1]))
        np.testing.assert_allclose(lower(outs[0]), lower(outs[1]), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(lower(outs[1]), lower(np.tril(x.astype(np.float64) @ x.T.astype(np.float64))),
                                   rtol=1e-5, atol=1e-4)


def test_the_fence_picks_the_fallback_outside_the_checked_versions(monkeypatch):
    low, high = blas.SCIPY_CHECKED
    assert blas.checked(low) and not blas.checked(high) and not blas.checked((low[0], low[1] - 1))
    monkeypatch.setattr(blas, "scipy_version", lambda: high)
    assert blas.ssyrk() is blas.numpy_syrk
    monkeypatch.setattr(blas, "scipy_version", lambda: None)
    assert blas.ssyrk() is blas.numpy_syrk
    monkeypatch.setattr(blas, "scipy_version", lambda: low)
    assert blas.ssyrk() is not blas.numpy_syrk


def test_ctypes_pythonapi_is_left_as_it_was():
    before = {name: (getattr(ctypes.pythonapi, name).restype, getattr(ctypes.pythonapi, name).argtypes)
              for name in ("PyCapsule_GetName", "PyCapsule_GetPointer")}
    assert blas.scipy_ssyrk() is not None
    after = {name: (getattr(ctypes.pythonapi, name).restype, getattr(ctypes.pythonapi, name).argtypes)
             for name in before}
    assert after == before
