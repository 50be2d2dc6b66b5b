"""Where ijson and msgspec read the same JSON text differently, found without parsing it: an
integer outside int64, a number beyond the float range, bytes that are not UTF-8 (ijson refuses
them; msgspec takes the first and skips the others in keys a decode of some fields does not read).
The fast parse (:mod:`.fastscan`) decodes a piece with msgspec only when :func:`agrees` says the two
agree on it; otherwise ijson reads it and names what it refuses."""

from __future__ import annotations

import re


#: Runs of 19 digits or more (integers that may lie outside what ijson takes, |v| <= 2**63 - 1, 19
#: digits) are found in the text mapped digits -> "0", the rest -> " " (``bytes.translate`` +
#: ``find``: 0.6 ms per MiB here, against 7 ms for the regular expression ``\d{19}``).
#: The same map sends ``e``, ``E`` and ``+`` to ``e``: an exponent of 3 digits or more (the only way,
#: besides an integer part of 19 digits or more, to write a number beyond the float range, which ijson
#: refuses) is ``e000`` in the mapped text (``e+400`` -> ``ee000``), found by one ``find`` (~40 ms per
#: 62 MB here, 2026-12-07; a second pattern would double it) and checked precisely.
_DIGIT_MAP = bytes(48 if 48 <= i <= 57 else 101 if i in (43, 69, 101) else 32 for i in range(256))
_RUN = b"0" * 19
_EXPONENT = b"e000"
_DIGITS = re.compile(rb"[0-9]+")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_MANTISSA = frozenset(b"0123456789.")
_INT_MAX = (1 << 63) - 1
#: What JSON allows right before a number token and right after an integer one (b"": the text's end).
_BEFORE_NUMBER = frozenset((b":", b",", b"[", b" ", b"\t", b"\r", b"\n", b""))
_AFTER_INT = frozenset((b",", b"]", b"}", b" ", b"\t", b"\r", b"\n", b""))
_INF = float("inf")


def agrees(text: bytes) -> bool:
    """Whether ijson reads the JSON text ``text`` (bytes) as msgspec does, in the keys a decode of
    some fields only skips too (msgspec checks neither the range of a number nor the UTF-8 of a string
    it skips; ijson refuses both): False when ``text`` may hold an integer outside int64
    (:func:`_ints_agree`), a number beyond the float range (:func:`_floats_agree`) or bytes that are
    not UTF-8. Cost (project machine, 2026-12-07): one ``bytes.translate`` and three ``find`` over the
    text, ``isascii`` (a ``decode`` only for text that is not ASCII). Raises nothing."""
    t = text.translate(_DIGIT_MAP)
    if not (_ints_agree(text, t) and _floats_agree(text, t)):
        return False
    if text.isascii():
        return True
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _ints_agree(text: bytes, t: bytes | None = None) -> bool:
    """False when ``text`` may hold an integer literal that ijson refuses (|v| > 2**63 - 1) and msgspec
    decodes: a run of 19+ digits placed as a number token can be (after ``:``, ``,``, ``[`` or
    whitespace, an optional ``-``; before ``,``, ``]``, ``}`` or whitespace), not a float's digits, and
    out of that range. A run placed otherwise lies inside a string, where both decoders agree; a string
    holding such a token-like run (``"a: 12345678901234567890 b"``) counts too (conservative). A run
    that starts a float token (``.``, ``e`` or ``E`` after it) is checked as :func:`_floats_agree`
    checks one. ``t``: ``text.translate(_DIGIT_MAP)`` when the caller has it."""
    if t is None:
        t = text.translate(_DIGIT_MAP)
    i = t.find(_RUN)
    while i >= 0:  # i: the start of a run (the previous run ended before it)
        m = _DIGITS.match(text, i)
        b = m.end()  # type: ignore[union-attr]
        a = i - 1 if text[i - 1:i] == b"-" else i
        if text[a - 1:a] in _BEFORE_NUMBER:
            if text[b:b + 1] in _AFTER_INT:
                if b - i > 19 or int(text[i:b]) > _INT_MAX:
                    return False
            elif _overflows(text, a):  # an integer part of 19+ digits: a float beyond the range?
                return False
        i = t.find(_RUN, b)
    return True


def _floats_agree(text: bytes, t: bytes) -> bool:
    """False when ``text`` may hold a number token beyond the float range (``1e400``: ijson raises
    *numeric (floating point) overflow*; msgspec decodes it in a key it skips): each exponent of 3+
    digits (``e000`` in the mapped text ``t``: ``e``, ``E`` or the ``+`` of ``e+``, then 3 digits) whose
    number, walked back to its start, is a token placed as :func:`_ints_agree` places one and overflows
    to infinity. An integer part of 19+ digits is :func:`_ints_agree`'s to check."""
    j = t.find(_EXPONENT)
    while j >= 0:
        e = j - 1 if text[j] == 43 else j  # "+": the exponent's letter is before it
        k = e
        while k > 0 and text[k - 1] in _MANTISSA:
            k -= 1
        if text[k - 1:k] == b"-":
            k -= 1
        if k < e and text[e] in b"eE" and text[k - 1:k] in _BEFORE_NUMBER and _overflows(text, k):
            return False
        j = t.find(_EXPONENT, j + 1)
    return True


def _overflows(text: bytes, a: int) -> bool:
    """Whether the number token starting at ``a`` (a JSON number followed by what may follow one)
    lies beyond the float range (its value rounds to infinity)."""
    m = _NUMBER.match(text, a)
    if m is None or text[m.end():m.end() + 1] not in _AFTER_INT:
        return False
    return float(m.group()) in (_INF, -_INF)
