"""The step log: the pullback's events written as the lines of a derivation.

Each line reads ``dλ = before`` → ``dλ = after`` with the identity it used.  A run of
bookkeeping steps (A:B = B:A, linearity, scalars) becomes one line, as on paper; when a
named quantity is written out, a line says so (dz = dW@x) and later lines print it in full.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .ir import Expr


@dataclass(frozen=True)
class Step:
    """One line of the derivation: ``dλ = before`` becomes ``dλ = after`` by ``identity``.
    ``expanded`` holds the named nodes written out in full from this step on.  A line that
    writes a name out (z = W@x) keeps its texts as functions, typeset only when shown: a
    derivation wrt many weights has many such lines, most never read."""

    before: Expr
    after: Expr
    written: object  # the identity's text, or a function giving it
    expanded: frozenset = frozenset()
    written_latex: object = ""
    minor: bool = False

    @property
    def identity(self) -> str:
        return self.written if isinstance(self.written, str) else self.written()

    @property
    def identity_latex(self) -> str:
        return self.written_latex if isinstance(self.written_latex, str) else self.written_latex()

    @property
    def text(self) -> str:
        from .printing import to_text

        return f"{to_text(self.after)}    ({self.identity})"


def build_steps(events, names: dict, dims: dict | None = None) -> list:
    """Steps from the pullback's events (``dims``: how a dimension prints, as in the result)."""
    from .printing import to_latex, to_text

    steps: list[Step] = []
    expanded: frozenset = frozenset()
    current = None

    def add(after, text, latex, minor, hidden):
        nonlocal current
        before = current
        if minor and steps and steps[-1].minor:  # one line for a run of bookkeeping steps
            prev = steps.pop()
            if text not in prev.identity.split("; "):
                text, latex = prev.identity + "; " + text, prev.identity_latex + ";\\ " + latex
            else:
                text, latex = prev.identity, prev.identity_latex
            before = prev.before
        steps.append(Step(before, after, text, hidden, latex, minor))
        current = after

    for ev in events:
        if ev.kind == "start":
            current = ev.state
            continue
        if ev.kind == "expand":
            node = ev.node
            shown = {k: v for k, v in names.items() if k not in expanded and k is not node}
            expanded = expanded | {node}
            label = str(names[node])
            add(current, cache(lambda node=node, shown=shown, label=label: f"{label} = {to_text(node, shown, dims)}"),
                cache(lambda node=node, shown=shown: f"{to_latex(node, {node: names[node]}, dims)} = "
                                                     f"{to_latex(node, shown, dims)}"),
                False, expanded)
            continue
        idn = ev.identity
        add(ev.state, idn.text, idn.latex, idn.minor, expanded)
    return steps

