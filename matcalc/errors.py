"""Refusals. Every one names what is wrong and where, with a caret under the column."""
from __future__ import annotations

import re


class MatcalcError(Exception):
    """Base class of every refusal. ``str(err)`` is the message the CLI prints."""

    kind = "error"

    def __init__(self, message: str, source: str | None = None,
                 start: int | None = None, end: int | None = None):
        self.message = message
        self.source = source
        self.start = start
        self.end = end
        super().__init__(self.render())

    @property
    def column(self) -> int | None:
        """1-based column of the offending sub-expression, if known."""
        return None if self.start is None else self.start + 1

    def render(self) -> str:
        message = self.message
        if len(message) > 600:  # a 10,000-character name echoed: its ends say enough
            message = message[:400] + " … " + message[-150:]
        head = f"{self.kind}: {message}"
        head = "".join(ch if ch.isprintable() else " " for ch in head)
        if self.source is None or self.start is None:
            return head
        # one display column per character: line breaks, tabs and control characters become spaces
        line = "".join(ch if ch.isprintable() else " " for ch in self.source)
        start = min(max(self.start, 0), len(line))
        end = max(min(self.end if self.end is not None else start + 1, len(line)), start + 1)
        if len(line) > 200:  # show a window around the column for very long input
            lo = max(0, start - 80)
            hi = min(len(line), start + 160)
            prefix = "..." if lo else ""
            line = prefix + line[lo:hi] + ("..." if hi < len(line) else "")
            start, end = start - lo + len(prefix), min(end, hi) - lo + len(prefix)
        pad, width = _width(line[:start]), _width(line[start:end])
        if start < len(line) and width == 0 and pad:  # a combining mark: under the character it sits on
            pad -= 1
        caret = " " * pad + "^" * max(1, width)
        return f"{head} (column {self.column})\n  {line}\n  {caret}"


def _width(text: str) -> int:
    """The columns a terminal gives text: two for a wide (East Asian) character such as 全 or ｘ,
    none for a combining mark (the hat of x̂), one for any other."""
    import unicodedata

    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


class ParseError(MatcalcError):
    kind = "parse error"


class ShapeError(MatcalcError):
    kind = "shape error"


class DeriveError(MatcalcError):
    """The request itself is refused (wrt not a symbol of the expression, bad option)."""

    kind = "error"


class OutOfMemory(DeriveError, MemoryError):
    """A computation needs more memory than there is (the numerical check of a kron of
    krons): a refusal that says so, and still a MemoryError (the web's workers answer 422)."""


class NotationWarning(UserWarning):
    """Accepted input that probably does not mean what was meant: ``A*B`` of two matrices
    that only type-checks by making their shapes equal (a Hadamard product where ``@``
    was likely meant), ``W**-1`` of a matrix (entrywise, not the inverse), the Jacobian of a
    scalar (the gradient's transpose).  ``str(w)`` says what was done instead and, where
    it can, names the sub-expression with a caret under its column, like a refusal."""

    kind = "note"

    def __init__(self, message: str, source: str | None = None,
                 start: int | None = None, end: int | None = None):
        self.message, self.source, self.start, self.end = message, source, start, end
        super().__init__(MatcalcError.render(self))

    column = MatcalcError.column


def not_symbols(option: str, unknown: list, symbols) -> str:
    """The refusal of values given for names that are not symbols of the question."""
    which = "which is not a symbol" if len(unknown) == 1 else "which are not symbols"
    return f"{option} names {', '.join(unknown)}, {which} of the expression; its symbols are {', '.join(symbols)}"


def not_in_expression(wrt: str, names) -> DeriveError:
    """The refusal of a wrt the expression does not contain, with the closest symbol's name."""
    import difflib

    from .shapes import PI_NAMES

    names = list(names)
    pi = (f" ({wrt} is the number π unless its shape is declared: shapes={{'{wrt}': ('n',)}}, --shape {wrt}=n)"
          if wrt in PI_NAMES else "")
    if not names:
        return DeriveError(f"{wrt!r} does not occur in the expression, which has no symbols: "
                           f"it is a constant{pi}")
    from .printing import _UNICODE_GREEK

    spelled = {_UNICODE_GREEK.get(wrt), *(g for g, word in _UNICODE_GREEK.items() if word == wrt)}  # α, alpha
    close = ([n for n in names if n.lower() == wrt.lower()] or [n for n in names if n in spelled]
             or difflib.get_close_matches(wrt, names, n=1))
    hint = f" (did you mean {close[0]}?)" if close else ""
    hint = pi or hint
    several = [w.strip() for w in wrt.replace(" ", ",").split(",") if w.strip()]
    if len(several) > 1 and all(w in names for w in several):  # "X,W": one wrt per name
        hint = (f" (for several, give each its own: --wrt {' --wrt '.join(several)}, or "
                f"wrt={several!r})")
    glued = [n for n in names if len(n) > len(wrt) and n[:1].isupper() and (n.endswith(wrt) or n.startswith(wrt))
             and wrt[:1].isupper() and sum(ch.isupper() for ch in n) >= 2]
    if glued:  # tr(AX): one name, where the product A@X was meant
        n = glued[0]
        a, b = (n[:-len(wrt)], wrt) if n.endswith(wrt) else (wrt, n[len(wrt):])
        hint = f" ({n} is one name; the product of {a} and {b} is {a}@{b})"
    transposed = re.fullmatch(r"(\w+)\s*(\.T|'|ᵀ)", wrt)
    if transposed and transposed.group(1) in names:  # --wrt X.T
        hint = f" (the gradient in {wrt} is that in {transposed.group(1)}, transposed: --wrt {transposed.group(1)})"
    elif re.search(r"[@*/+\-()]", wrt):  # --wrt "A@X": a sub-expression, which a definition names
        hint = (f" (to differentiate in a sub-expression, name it and write the name in its place: --let "
                f"Z='{wrt}' --wrt Z, or definitions={{'Z': '{wrt}'}}, wrt='Z')")
    import unicodedata

    plain = unicodedata.normalize("NFKC", wrt)
    if plain != wrt and plain in names or any(unicodedata.normalize("NFKC", n) == wrt and n != wrt for n in names):
        hint = " (a name in it is written with look-alike characters, such as full-width letters)"
    return DeriveError(f"{wrt!r} does not occur in the expression{hint}; its symbols are {', '.join(names)}")


def with_notes(fn, *args, **kw):
    """(fn(*args, **kw), the NotationWarnings it raised): what the CLI prints on stderr (str:
    with the caret) and ``--json`` and the web page return as ``notes`` (``.message``); other
    warnings pass on as they were."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NotationWarning)
        out = fn(*args, **kw)
    notes = []
    for w in caught:
        if issubclass(w.category, NotationWarning):
            notes.append(w.message)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out, notes

