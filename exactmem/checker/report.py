"""The one report of the checker: its failures, whether the input was unusable, what a
verified certificate proves (:attr:`CheckReport.claim`), and the verdict line and exit code
(docs/checker.md)."""

from fractions import Fraction

from .parse import show

VERDICTS = {0: "s VERIFIED", 1: "s REJECTED", 2: "s UNUSABLE"}


class CheckReport:
    """``verified`` only when no failure was found; ``unusable`` marks unreadable input;
    ``claim`` says what a verified certificate proves."""

    def __init__(self, failures, unusable=False, basis=None, positions=0, sequences=0):
        self.failures = list(failures)
        self.unusable = unusable
        self.basis, self.positions = basis, positions  # what was proved, and where
        self.sequences = sequences
        self.lm = None  # a language model's exact slice totals (lm_verify.merge)
        self.claim = _claim_text(positions, sequences, *basis) \
            if basis and self.verified else None

    @property
    def verified(self):
        return not self.failures and not self.unusable

    @property
    def exit_code(self):
        return 0 if self.verified else (2 if self.unusable else 1)

    @property
    def verdict(self):
        """The one stdout line: ``s VERIFIED``, ``s REJECTED`` or ``s UNUSABLE``."""
        return VERDICTS[self.exit_code]

    def __repr__(self):
        head = f"CheckReport({self.verdict[2:].lower()}"
        if self.claim:
            head += f", claim={self.claim!r}"
        if self.failures:
            head += f", {len(self.failures)} failures, first: {self.failures[0]!r}"
        return head + ")"


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


def _claim_text(positions, sequences, kind, exact, eps=None, gap=None, bits=None, formats=(),
                exists=False, total=0):
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
        what = (f"|f - label| <= epsilon = {show(eps)} < {show(Fraction(gap, 2))} = half the "
                "smallest gap between distinct labels, so the nearest label is the label")
    floats = "".join(_FLOAT_CLAIMS.get(f, _FLOAT_CLAIM).format(f) for f in formats)
    return f"memorization ({how}): at all {positions} read positions {what}{floats}"


