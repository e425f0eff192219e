"""BLAS `ssyrk` (C = X X^T, one triangle) from scipy's Cython BLAS, called without the GIL.

    syrk = ssyrk()            # scipy's routine in the checked versions, else `numpy_syrk`
    syrk(x, out)              # lower triangle of x @ x.T into the row-major float32 `out`

The exact kNN self-join (`datagen.images.knn_selfjoin`) computes the diagonal block pairs as one
triangle. scipy's Python wrapper `scipy.linalg.blas.ssyrk` holds the GIL for the whole product,
so the join's threads waited for each other; this module takes the routine's address out of
`scipy.linalg.cython_blas.__pyx_capi__["ssyrk"]` (a PyCapsule: scipy's Cython-level API, not a
Python one) and calls it through ctypes, which releases the GIL. The products are the same as
the Python wrapper's (the same routine). The capsule is read with private ctypes prototypes of
`PyCapsule_GetName` / `PyCapsule_GetPointer`; the shared `ctypes.pythonapi` functions are left
as they are.

Checked on scipy 1.17.1 (`SCIPY_CHECKED`: 1.17.x). Outside that range, or without scipy,
`ssyrk()` gives `numpy_syrk`, the plain fallback: numpy's full product (`np.matmul`), its lower
triangle copied into `out`; the answers are the same, the diagonal blocks cost twice the
products (tests/test_compat_blas.py compares the two).
"""
from __future__ import annotations

import ctypes
from typing import Callable, Optional

import numpy as np

SCIPY_CHECKED = ((1, 17), (1, 18))  # scipy versions [low, high) the ctypes path was checked on

Syrk = Callable[[np.ndarray, np.ndarray], None]


def _check(x: np.ndarray, out: np.ndarray) -> None:
    assert x.dtype == out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
    m, d = x.shape
    assert out.shape == (m, m) and max(m, d) < 2 ** 31


def numpy_syrk(x: np.ndarray, out: np.ndarray) -> None:
    """The lower triangle, diagonal included, of `x @ x.T` into `out` (its strict upper triangle
    untouched), by numpy's full product."""
    _check(x, out)
    np.copyto(out, np.matmul(x, x.T), where=np.tri(len(x), dtype=bool))


def scipy_version() -> Optional[tuple[int, int]]:
    """(major, minor) of the installed scipy; None without scipy or with an unreadable version."""
    try:
        import scipy
        major, minor = scipy.__version__.split(".")[:2]
        return int(major), int(minor)
    except (ImportError, ValueError):
        return None


def checked(version: Optional[tuple[int, int]] = None) -> bool:
    """Whether scipy's version (default: the installed one) lies in `SCIPY_CHECKED`."""
    version = scipy_version() if version is None else version
    return version is not None and SCIPY_CHECKED[0] <= version < SCIPY_CHECKED[1]


def scipy_ssyrk() -> Optional[Syrk]:
    """`syrk(x, out)` by scipy's Cython BLAS `ssyrk` through ctypes, whatever scipy's version;
    None without scipy. `ssyrk()` is the one to use: it checks the version."""
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capsule = cython_blas.__pyx_capi__["ssyrk"]
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    address = get_pointer(capsule, get_name(capsule))
    integer, real, ptr = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float), ctypes.c_void_p
    fortran = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, integer, integer, real, ptr,
                               integer, real, ptr, integer)(address)

    def syrk(x: np.ndarray, out: np.ndarray) -> None:
        """C = A^T A of the column-major A = X^T (X's own memory): syrk's upper triangle,
        column-major, is the row-major lower one of `out`."""
        _check(x, out)
        m, d = x.shape
        i = lambda v: ctypes.byref(ctypes.c_int(v))  # noqa: E731
        f = lambda v: ctypes.byref(ctypes.c_float(v))  # noqa: E731
        fortran(b"U", b"T", i(m), i(d), f(1.0), x.ctypes.data, i(d), f(0.0), out.ctypes.data, i(m))
    return syrk


def ssyrk() -> Syrk:
    """scipy's `ssyrk` through ctypes where scipy's version was checked (`SCIPY_CHECKED`), else
    `numpy_syrk`."""
    return (scipy_ssyrk() if checked() else None) or numpy_syrk
