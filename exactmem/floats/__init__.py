"""Float analysis: how a certified network fares in binary floating point.

* :mod:`exactmem.floats.formats`: IEEE formats and exact rounding of rationals into them;
* :mod:`exactmem.floats.mpfr_eval`: the forward pass in ``p``-bit floating point (MPFR);
* :mod:`exactmem.floats.float_judge`: which read positions float outputs get right;
* :mod:`exactmem.floats.fidelity`: the fidelity report and the fewest significand bits.
"""
