"""What a verified network certificate proves, in words (the ``c claim:`` line), and its
report (:func:`network_report`; the report type is :class:`.verdict.CheckReport`)."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from .parse import show
from .verdict import CheckReport

# what a network certificate proved: (readout kind, exact, epsilon, gap, bits, formats,
# exists, sequences in all); shard reports combine when theirs are equal
Basis = tuple[Any, ...]


def network_report(failures: Iterable[str], unusable: bool = False, basis: Basis | None = None,
                   positions: int = 0, sequences: int = 0) -> CheckReport:
    """The report of a network certificate (or of some of its slices): ``basis``, what
    was proved, kept as the report's ``totals`` so that shard reports combine; the claim
    over ``positions`` read positions of ``sequences`` sequences when verified."""
    report = CheckReport(failures, unusable,
                         counts={"positions": positions, "sequences": sequences})
    report.totals = basis
    if basis and report.verified:
        report.claim = _claim_text(positions, sequences, *basis)
    return report


_FLOAT_CLAIM = ("; float-exact in {} (every weight, product, partial sum in any order and "
                "activation of the float mirror is zero or a normal float of the format, so IEEE "
                "evaluation, flushing subnormals or not, gives the exact outputs)")
_FLOAT_CLAIMS = {
    "bfloat16-weights/float32": "; exact with {} (every weight-matrix entry a normal bfloat16; "
    "biases, embedding table, products, partial sums in any order and activations zero or "
    "normal float32 values: bf16 weights upcast in a float32 matmul give the exact outputs)",
    "int8": "; exact in {} (every weight-matrix entry an integer in [-128, 127]; biases, "
    "embedding table, inputs and activations integers; every partial sum in any order below "
    "2^31: int8 weights with int32 accumulation give the exact outputs, on kernels that add "
    "products in int32 in any order and on u8 x s8 kernels that add pairs of products in "
    "saturating int16 when activations are fed as 7-bit limbs, as the export does: a pair "
    "is then at most 2 * 127 * 128 = 32512 < 2^15)"}


def _claim_text(positions: int, sequences: int, kind: str, exact: bool,
                eps: Fraction | None = None, gap: int | None = None, bits: int | None = None,
                formats: tuple[str, ...] = (), exists: bool | None = False, total: int = 0
                ) -> str:
    how = "exact evaluation" if exact else f"rigorous softmax bounds at {bits} bits"
    if sequences < total:
        how += (f"; a subset: {sequences} of the {total} sequences, those listed in "
                "claims.sequences")
    if exists:
        return (f"an exact real readout exists ({how}): the feature matrix of the "
                f"{positions} read positions before the linear readout is non-singular on "
                "the hinted columns, so some real readout row gives every label exactly "
                "(the readout written in the certificate is an approximation)")
    if kind == "argmax":
        what = "the argmax is unique and is the label"
    elif exact:
        what = "the output equals the label"
    else:
        assert eps is not None and gap is not None  # a scalar readout's softmax bounds
        what = (f"|f - label| <= epsilon = {show(eps)} < {show(Fraction(gap, 2))} = half the "
                "smallest gap between distinct labels, so the nearest label is the label")
    floats = "".join(_FLOAT_CLAIMS.get(f, _FLOAT_CLAIM).format(f) for f in formats)
    return f"memorization ({how}): at all {positions} read positions {what}{floats}"


