"""Exact numbers: rationals, scaled integer matrices (and, later, rigorous bounds for exp)."""

from exactmem.arith.rational import bit_length, format_rational, to_rational
from exactmem.arith.scaled import ScaledMatrix

__all__ = ["ScaledMatrix", "bit_length", "format_rational", "to_rational"]
from exactmem.arith.expbounds import ExpEnclosure, exp_bounds, exp_enclosure  # noqa: E402
from exactmem.arith.softmax import SoftmaxEnclosure, softmax_enclosure  # noqa: E402

__all__ += ["ExpEnclosure", "SoftmaxEnclosure", "exp_bounds", "exp_enclosure",
            "softmax_enclosure"]
