"""The ``exactmem`` command runs numpy's BLAS on one thread unless the user chose a count
with one of the usual environment variables."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
import threadpoolctl

from exactmem import cli


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"]


def test_one_blas_thread_inside_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in cli.BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    assert np.ones(2) @ np.ones(2) == 2  # numpy's BLAS is loaded
    before = _blas_threads()
    with cli.blas_threads():
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before  # restored after the command


@pytest.mark.parametrize("var", cli.BLAS_THREAD_VARIABLES)
def test_a_count_the_user_set_stands(monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    monkeypatch.setenv(var, "2")
    assert isinstance(cli.blas_threads(), nullcontext)
