"""Vec (Kronecker) forms of linear maps: vec(L[dW]) = J vec(dW), vec column-major.

A linear map L[dW] (an IR expression linear in the differential dW) is turned into
a sum of terms ``c · F₁ F₂ … Fₖ`` whose factors are matrices acting on vec(dW):

- ``Kron(B, A)``  B ⊗ A, from vec(A X Bᵀ) = (B ⊗ A) vec X; B = 1 is the plain matrix A
  (a vector variable), an identity prints with its size (``I_m``);
- ``Comm(p, q)``  the commutation matrix K_pq: vec(Xᵀ) = K_pq vec(X) for a p×q X;
- ``DiagV(h)``    Diag(vec h), from vec(h∘X) = Diag(vec h) vec X;
- ``RowV(C)``     vec(C)ᵀ, from C:X = vec(C)ᵀ vec X (sum and tr are C = 1 and C = I);
- ``ColV(c)``     vec(c), from a scalar broadcast over an array (c ∘ (s:dx)).

The factors stay symbolic (their arguments are IR expressions) and are folded where a
textbook would fold them: (B₁ ⊗ A₁)(B₂ ⊗ A₂) = B₁B₂ ⊗ A₁A₂, vec(C)ᵀ(B ⊗ A) = vec(AᵀCB)ᵀ,
K_qp K_pq = I.  ``vec_form`` returns None where no such form can be written (diag of
dW, say).  ``VecForm.dense_source`` writes NumPy code building the dense matrix from the
form: never a Kronecker product or K to apply them (K is a permutation, B ⊗ A applied
to M is A M Bᵀ per column), and two fast paths: c(A + Aᵀ) as a cache-blocked
transpose-add, AᵀDiag(h)A as a symmetric rank-k update.

Each linear operator's rule is the ``vec`` field of its registry entry (``VEC_RULES`` is a view).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import ir
from .ir import SCALAR, Expr, const
from .ops import REGISTRY
from .simplify import s_add, s_div, s_frob, s_matmul, s_mul, s_T, simplify


def dims_of(d) -> tuple:
    """A dimension as a product of dims (1 is the empty product)."""
    return () if d == 1 else (d,)


@dataclass(frozen=True)
class Kron:
    B: Expr  # const 1 (a 1×1): the plain matrix A
    A: Expr

    @property
    def rows(self):
        return dims_of(self.A.shape[0]) + dims_of(self.B.shape[0])

    @property
    def cols(self):
        return dims_of(self.A.shape[1]) + dims_of(self.B.shape[1])


@dataclass(frozen=True)
class Comm:
    p: object  # K_pq vec(X) = vec(Xᵀ), X p×q
    q: object

    @property
    def rows(self):
        return dims_of(self.p) + dims_of(self.q)

    cols = rows


@dataclass(frozen=True)
class DiagV:
    h: Expr

    @property
    def rows(self):
        return dims_of(self.h.shape[0]) + dims_of(self.h.shape[1])

    cols = rows


@dataclass(frozen=True)
class RowV:
    C: Expr

    rows = ()

    @property
    def cols(self):
        return dims_of(self.C.shape[0]) + dims_of(self.C.shape[1])


@dataclass(frozen=True)
class ColV:
    c: Expr

    @property
    def rows(self):
        return dims_of(self.c.shape[0]) + dims_of(self.c.shape[1])

    cols = ()


ONE = const(1.0)


def _is_one(e: Expr) -> bool:
    return e.op == "const" and e.shape == SCALAR and e.attr == 1.0


def _mm(a: Expr, b: Expr) -> Expr:
    """a@b, with Diag(h) applied to a column as h∘c (also inside an outer product c rᵀ)."""
    if a.op == "Diag" and b.op == "matmul" and b.args[0].shape[1] == 1 and b.args[0].shape[0] != 1:
        return simplify(s_matmul(s_mul(a.args[0], b.args[0]), b.args[1]))
    if a.op == "Diag" and b.shape[1] == 1 and b.shape[0] != 1:
        return simplify(s_mul(a.args[0], b))
    return s_matmul(a, b)


def _is_eye(e: Expr) -> bool:
    return e.op == "eye"


def _identity(f) -> bool:
    return isinstance(f, Kron) and (_is_eye(f.A) or _is_one(f.A)) and (_is_eye(f.B) or _is_one(f.B))


def _same_size(a: tuple, b: tuple) -> bool:
    """Whether two products of dimensions are one size ((a*b,) and (a, b) are, (12,) and (4, 3))."""
    def flat(ds):
        fs = [f for d in ds for f in ir.dim_factors(d)]
        return math.prod(f for f in fs if isinstance(f, int)), sorted(f for f in fs if not isinstance(f, int))
    return flat(a) == flat(b)


def kron(B: Expr, A: Expr) -> Kron:
    """B ⊗ A; B ⊗ 1 is the plain matrix B, kept as 1 ⊗ B."""
    return Kron(A, B) if _is_one(A) and not _is_one(B) else Kron(B, A)


def fold(f, g):
    """f @ g as one factor, or None if they do not fold."""
    if _identity(g) and _same_size(f.cols, g.rows):
        return f
    if _identity(f) and _same_size(f.cols, g.rows):
        return g
    if isinstance(f, Kron) and isinstance(g, Kron):
        if f.A.shape[1] == g.A.shape[0] and f.B.shape[1] == g.B.shape[0]:
            return kron(_mm(f.B, g.B), _mm(f.A, g.A))
        return None
    if isinstance(f, Comm) and isinstance(g, Comm) and (f.p, f.q) == (g.q, g.p):
        return "identity"
    if isinstance(f, Kron) and _is_one(f.B) and isinstance(g, ColV):
        c = _like(g.c, (f.A.shape[1], 1))
        if c is not None:
            if f.A.op == "Diag":  # Diag(h) c = h∘c
                return ColV(simplify(s_mul(f.A.args[0], c)))
            return ColV(simplify(s_matmul(f.A, c)))
    if isinstance(f, ColV) and isinstance(g, RowV) and 1 in f.c.shape and 1 in g.C.shape:
        c, C = _like(f.c, (f.c.shape[0] * f.c.shape[1], 1)), _like(g.C, (g.C.shape[0] * g.C.shape[1], 1))
        if c is not None and C is not None and f.c.shape != SCALAR and g.C.shape != SCALAR:
            return Kron(ONE, simplify(s_matmul(c, s_T(C))))  # an outer product: a plain matrix
    if isinstance(f, DiagV) and isinstance(g, (ColV, DiagV)):
        h = g.c if isinstance(g, ColV) else g.h
        other = _like(h, f.h.shape)
        if other is None:
            return None
        prod = simplify(s_mul(f.h, other))
        return ColV(prod) if isinstance(g, ColV) else DiagV(prod)
    if isinstance(f, RowV):
        if isinstance(g, Kron) and (_is_one(g.B) or _is_eye(g.B)):
            C = _like(f.C, (g.A.shape[0], g.B.shape[0]))
            if C is not None:
                return RowV(simplify(s_matmul(s_matmul(s_T(g.A), C), g.B)))
        if isinstance(g, DiagV):
            C = _like(f.C, g.h.shape)
            if C is not None:
                return RowV(simplify(s_mul(C, g.h)))
        if isinstance(g, Comm) and f.C.shape == (g.q, g.p):  # vec(C)ᵀK_pq = vec(Cᵀ)ᵀ for C q×p
            return RowV(simplify(s_T(f.C)))
        if isinstance(g, ColV) and _like(f.C, g.c.shape) is not None:  # a 1×1 block: vec(C)ᵀvec(c) = C:c
            C = _like(f.C, g.c.shape)
            return Kron(ONE, simplify(s_matmul(s_T(C), g.c) if C.shape[1] == 1 else s_frob(C, g.c)))
    return None


def _like(h: Expr, shape):
    """h with the given shape: itself, or a vector's transpose (the same vec); else None."""
    if h.shape == shape:
        return h
    if h.shape == shape[::-1] and 1 in shape:
        return simplify(s_T(h))
    return None


def _prepend(f, chain: tuple) -> tuple:
    if not chain:
        return (f,)
    g = fold(f, chain[0])
    if g is None:
        return (f,) + chain
    if g == "identity":  # K_qp K_pq = I: an empty chain would lose the size
        return chain[1:] or (Kron(ir.eye(f.q), ir.eye(f.p)),)
    return _prepend(g, chain[1:])


class VecForm:
    """Σ coef · chain: vec(L[dW]) = J vec(dW)."""

    def __init__(self, terms, n_rows, n_cols):
        self.terms = terms   # [(scalar IR coefficient, (factor, …))]
        self.rows = n_rows   # dims whose product is the number of rows
        self.cols = n_cols

    # ---- building
    @staticmethod
    def identity(dW: Expr) -> "VecForm":
        p, q = dW.shape
        return VecForm([(ONE, (Kron(ir.eye(q), ir.eye(p)),))], dims_of(p) + dims_of(q), dims_of(p) + dims_of(q))

    def then(self, f) -> "VecForm":
        """f @ self."""
        return VecForm([(c, _prepend(f, ch)) for c, ch in self.terms], f.rows, self.cols)

    def scaled(self, c: Expr) -> "VecForm":
        return VecForm([(simplify(s_mul(c, k)), ch) for k, ch in self.terms], self.rows, self.cols)

    def with_symmetry(self, names) -> "VecForm":
        """Every matrix in the terms written with Sᵀ = S for S in names, and like terms then
        collected (x xᵀS and x xᵀSᵀ are one term with S symmetric)."""
        import dataclasses

        from .symmetric import use_symmetry

        def sym(f):
            return dataclasses.replace(f, **{k.name: use_symmetry(getattr(f, k.name), names)
                                             for k in dataclasses.fields(f) if isinstance(getattr(f, k.name), Expr)})

        return VecForm([(use_symmetry(c, names), tuple(sym(f) for f in ch)) for c, ch in self.terms],
                       self.rows, self.cols).canonical()

    def canonical(self) -> "VecForm":
        """Like terms collected; a lone Kronecker factor with an identity or 1 on one side
        takes the coefficient into its other side (kron(I_m, 2*X.T@X)), and such terms with
        equal sides are added (A + Aᵀ, 2(μI + AᵀA))."""
        coeffs: dict = {}
        for c, ch in self.terms:
            if len(ch) == 1 and isinstance(ch[0], Kron) and not _is_one(c):
                k = ch[0]
                if not _is_eye(k.A) and (_is_one(k.B) or _is_eye(k.B)):
                    ch, c = (Kron(k.B, simplify(s_mul(c, k.A))),), ONE
                elif _is_eye(k.A) and not (_is_eye(k.B) or _is_one(k.B)):
                    ch, c = (Kron(simplify(s_mul(c, k.B)), k.A),), ONE
            coeffs[ch] = simplify(s_add(coeffs[ch], c)) if ch in coeffs else c
        groups: dict = {}
        for ch, c in coeffs.items():
            if c.op == "const" and c.attr == 0.0:
                continue
            key = ("term", ch)
            if len(ch) == 1 and isinstance(ch[0], Kron) and not _identity(ch[0]):
                k = ch[0]
                key = ("B", k.A) if _is_eye(k.A) else ("A", k.B)
            groups.setdefault(key, []).append((c, ch))
        out = []
        for (side, _), items in groups.items():
            if side == "term" or len(items) == 1:
                out.extend(items)
                continue
            if side == "A":
                k = Kron(items[0][1][0].B, simplify(s_add(*[s_mul(c, ch[0].A) for c, ch in items])))
            else:
                k = Kron(simplify(s_add(*[s_mul(c, ch[0].B) for c, ch in items])), items[0][1][0].A)
            if not any(m.op == "const" and m.attr == 0.0 for m in (k.A, k.B)):
                out.append((ONE, (k,)))
        return VecForm(out, self.rows, self.cols)

    # ---- printing
    names: dict = {}  # node -> name (definitions), used in the printed pieces
    dims: dict = {}   # dimension -> (symbol, axis): a size prints as size(X, 0)
    taken: frozenset = frozenset()  # what the question's symbols typeset as (printing.to_latex)
    symmetric: tuple = ()           # symmetric matrices: their transposes print as themselves

    def _names(self, e: Expr, latex: bool = False) -> dict:
        """Identities as I_n, and arrays of one number with their sizes (a bare 1 or 2 in a
        Kronecker factor would read as a scalar): 1_a (a ones), 1_b.T, 2*1_a@1_b.T."""
        out = {n: _identity_name(n.shape[0], latex) for n in ir.walk(e) if n.op == "eye"}
        for n in ir.walk(e):
            if n.op == "const" and n.shape != SCALAR and n not in self.names:
                out[n] = _ones_text(n, latex)
        return {**self.names, **out}

    def _print(self, e: Expr, names: dict, latex: bool) -> str:
        from .naming import regrouped
        from .printing import to_latex, to_text

        e = regrouped(e, self.names)  # (x2 - y, not its terms, for a defined x2)
        if self.symmetric:  # kron(inv(S).T, inv(S)) of a symmetric S is kron(inv(S), inv(S))
            from .symmetric import use_symmetry

            e = use_symmetry(e, self.symmetric)

        return to_latex(e, names, taken=self.taken) if latex else to_text(e, names, self.dims)

    def _ir_text(self, e: Expr, latex: bool) -> tuple:
        names = self._names(e, latex)
        e = _display_order(e, names)
        return self._print(e, {**names, **self._names(e, latex)}, latex), e.op == "add"

    def _factor(self, f, latex: bool, alone: bool) -> str:
        par = (lambda s: f"\\left({s}\\right)") if latex else (lambda s: f"({s})")
        if isinstance(f, Kron):
            if f.A.op == "eye" and f.B.op == "eye":
                if latex:
                    return f"I_{{{_dims_tex(f.A.shape[0])} {_dims_tex(f.B.shape[0])}}}"
                return f"I_{_size_label(f.A.shape[0], f.B.shape[0])}"
            if _is_one(f.B) or _is_one(f.A):
                s, is_sum = self._ir_text(f.B if _is_one(f.A) else f.A, latex)
                return par(s) if is_sum and not alone else s
            (b, b_sum), (a, a_sum) = self._ir_text(f.B, latex), self._ir_text(f.A, latex)
            if latex:
                b, a = (par(b) if b_sum else b), (par(a) if a_sum else a)
                return f"\\left({b} \\otimes {a}\\right)" if not alone else f"{b} \\otimes {a}"
            return f"kron({_unwrap(b)}, {_unwrap(a)})"
        if isinstance(f, Comm):
            return f"K_{{{_dims_tex(f.p)},{_dims_tex(f.q)}}}" if latex else f"K_{_dims_label(f.p, f.q)}"
        if isinstance(f, DiagV):
            h = simplify(s_T(f.h)) if f.h.shape[0] == 1 else f.h
            s = self._ir_text(h, latex)[0]
            if h.shape[1] != 1:
                s = f"\\operatorname{{vec}}\\left({s}\\right)" if latex else f"vec({s})"
            return f"\\operatorname{{Diag}}\\left({s}\\right)" if latex else f"Diag({s})"
        if isinstance(f, RowV):
            if f.C.shape[1] == 1:
                s, is_sum = self._ir_text(simplify(s_T(f.C)) if not latex else f.C, latex)
                if latex:
                    return (par(s) if is_sum or f.C.op != "sym" else s) + "^{\\top}"
                return par(s) if is_sum and not alone else s
            s = self._ir_text(f.C, latex)[0]
            return f"\\operatorname{{vec}}\\left({s}\\right)^{{\\top}}" if latex else f"vec({_unwrap(s)}).T"
        if isinstance(f, ColV):
            s, is_sum = self._ir_text(f.c, latex)
            if f.c.shape[1] == 1:
                return par(s) if is_sum and not alone else s
            return f"\\operatorname{{vec}}\\left({s}\\right)" if latex else f"vec({_unwrap(s)})"
        raise TypeError(f)

    def _render(self, latex: bool) -> str:
        parts = []
        for i, (c, ch) in enumerate(self.terms):
            alone = len(ch) == 1 and _is_one(c)
            fs = [self._factor(f, latex, alone) for f in ch]
            if not latex:  # a@b*c reads (a@b)*c: a product after the first factor is a group
                fs = fs[:1] + [f"({f})" if _top_level_product(f) else f for f in fs[1:]]
            body = (" " if latex else "@").join(fs)
            negative, pos = _neg_split(c)
            if negative and _is_one(pos):
                s = body
            elif _is_one(c):
                s = body
            else:
                cs = self._print(pos if negative else c, self._names(c, latex), latex)
                if pos.op == "add" or (not negative and c.op == "add"):
                    cs = f"\\left({cs}\\right)" if latex else f"({cs})"
                s = f"{cs} {body}" if latex else f"{cs}*{body}"
            if not negative and i > 0 and s.startswith("-"):
                negative, s = True, s[1:]
            if negative:
                parts.append(("-" if i == 0 else " - ") + s)
            else:
                parts.append(s if i == 0 else " + " + s)
        if not parts:
            return "0"
        return "".join(parts)

    @property
    def text(self) -> str:
        return self._render(False)

    @property
    def latex(self) -> str:
        return self._render(True)

    # ---- NumPy
    def pieces(self) -> list:
        """The IR coefficients the dense code needs (computed by the emitted function)."""
        out = []
        for c, ch in self.terms:
            if not _is_one(c):
                out.append(c)
            for f in ch:
                if isinstance(f, Kron):
                    for m in (f.B, f.A):
                        if m.op != "eye" and not _is_one(m):
                            if _xtdx_base(m):
                                out.extend(_xtdx_base(m)[1:])
                            else:
                                out.append(_symadd_base(m)[1] if _symadd_base(m) else m)
                elif isinstance(f, DiagV):
                    out.append(f.h)
                elif isinstance(f, RowV):
                    out.append(f.C)
                elif isinstance(f, ColV):
                    out.append(f.c)
        seen, uniq = set(), []
        for p in out:
            if p not in seen:
                seen.add(p)
                uniq.append(p)
        return uniq

    def dense_expr(self, code: dict, dim, backend: str = "numpy", like: str = "") -> tuple:
        """(expression of the dense matrix, helpers used) in ``backend`` (numpy, torch or jax)
        given ``code`` (each of ``self.pieces()`` -> its code) and ``dim`` (a dimension -> its
        code); ``like`` is appended to the arguments of every new framework array (its dtype
        and device).  NumPy's ``_kron`` takes an int for an identity; the frameworks' take
        matrices."""
        m_ = {"numpy": "np", "torch": "torch", "jax": "jnp"}[backend]
        helpers = set()

        def size(ds):
            return " * ".join(dim(d) for d in ds) if ds else "1"

        def vec(piece):
            helpers.add("_vec")
            return f"_vec({code[piece]})"

        def eye(n):
            return f"{m_}.eye({n}{like})"

        def matmul(a, b):
            return f"{a}.dot({b})" if backend == "numpy" else f"({a} @ {b})"

        def as2d(m):
            helpers.add("_mat")
            return f"_mat({code[m]}, {dim(m.shape[0])}, {dim(m.shape[1])})"

        def mat(m):
            if m.op == "eye":
                return eye(dim(m.shape[0]))
            xd = _xtdx_base(m)
            if xd is not None:
                helpers.add("_xtdx")
                scale, P, h = xd
                s = f"_xtdx({code[P]}, {vec(h)})"
                return s if scale == 1.0 else f"({scale!r} * {s})"
            sb = _symadd_base(m)
            if sb is not None:
                helpers.add("_symadd")
                scale, base = sb
                return f"_symadd({code[base]}, {scale!r})"
            return as2d(m)

        def int_or_mat(m):
            """An identity as its size (an int), a 1 as 1, else the matrix."""
            if m.op == "eye":
                return dim(m.shape[0])
            if _is_one(m):
                return "1"
            return mat(m)

        kron_arg = int_or_mat if backend == "numpy" else mat

        def dense(f):
            if isinstance(f, Kron):
                if _identity(f):
                    return eye(size(f.rows))
                if _is_one(f.B):
                    return mat(f.A)
                if _is_one(f.A):
                    return mat(f.B)
                helpers.add("_kron")
                return f"_kron({kron_arg(f.B)}, {kron_arg(f.A)})"
            if isinstance(f, Comm):
                helpers.add("_comm")
                return f"_comm({eye(size(f.rows))}, {dim(f.p)}, {dim(f.q)})"
            if isinstance(f, DiagV):
                return f"{m_}.diag({vec(f.h)})"
            if isinstance(f, RowV):
                return f"{vec(f.C)}[None, :]"
            if isinstance(f, ColV):
                return f"{vec(f.c)}[:, None]"
            raise TypeError(f)

        def apply(f, M):
            if isinstance(f, Kron):
                if _is_one(f.B) and f.A.op != "eye" and not _is_one(f.A):
                    return matmul(mat(f.A), M)
                helpers.add("_kron_apply")
                return f"_kron_apply({int_or_mat(f.B)}, {int_or_mat(f.A)}, {M})"
            if isinstance(f, Comm):
                helpers.add("_comm")
                return f"_comm({M}, {dim(f.p)}, {dim(f.q)})"
            if isinstance(f, DiagV):
                return f"({vec(f.h)}[:, None] * {M})"
            if isinstance(f, RowV):
                return matmul(f"{vec(f.C)}[None, :]", M)
            if isinstance(f, ColV):
                return f"({vec(f.c)}[:, None] * {M})"
            raise TypeError(f)

        terms = []
        for c, ch in self.terms:
            special = _xtdx(ch)
            if special is not None:
                helpers.add("_xtdx")
                s = f"_xtdx({code[special[0]]}, {vec(special[1])})"
            else:
                s = dense(ch[-1])
                for f in reversed(ch[:-1]):
                    s = apply(f, s)
            if not _is_one(c):
                s = f"({code[c]} * {s})"
            terms.append(s)
        shape = f"({size(self.rows)}, {size(self.cols)})"
        if not terms:
            return f"{m_}.zeros({shape}{like})", helpers
        return f"{m_}.reshape({_balanced_sum(terms)}, {shape})", helpers


def _balanced_sum(terms: list) -> str:
    """a + b + … as code nested in halves, (a + b) + (c + d): the sum of thousands of terms
    (the Hessian of tr(X⁶⁴)) stays within Python's compiler's recursion limit."""
    if len(terms) <= 8:
        return " + ".join(terms)
    half = len(terms) // 2
    return f"({_balanced_sum(terms[:half])}) + ({_balanced_sum(terms[half:])})"


def _neg_split(c: Expr):
    """(True, -c) if the scalar coefficient c prints with a leading minus, else (False, c)."""
    return ir.negative_term(c) if c.op != "frob" else (False, c)


def _xtdx(ch):
    """(P, h) if the chain is Pᵀ Diag(h) P for a matrix P."""
    if len(ch) != 3 or not all(isinstance(f, (Kron, DiagV)) for f in ch):
        return None
    a, d, b = ch
    if not (isinstance(a, Kron) and isinstance(d, DiagV) and isinstance(b, Kron)):
        return None
    if not (_is_one(a.B) and _is_one(b.B) and d.h.shape[1] == 1):
        return None
    P = b.A
    if P.op == "eye" or len([x for x in P.shape if x != 1]) < 2:
        return None
    return (P, d.h) if simplify(s_T(P)) is a.A else None


def _xtdx_base(m: Expr):
    """(scale, P, h) if m is scale·Pᵀ Diag(h) P for a matrix P, else None."""
    scale = 1.0
    if m.op == "mul" and len(m.args) == 2 and m.args[0].op == "const" and m.args[0].shape == SCALAR:
        scale, m = m.args[0].attr, m.args[1]
    if m.op != "matmul" or m.args[0].op != "matmul":
        return None
    (a, d), P = m.args[0].args, m.args[1]
    if d.op != "Diag" or P.op == "eye" or 1 in P.shape or simplify(s_T(P)) is not a:
        return None
    return scale, P, d.args[0]


def _symadd_base(m: Expr):
    """(scale, B) if m is scale·(B + Bᵀ), else None."""
    scale = 1.0
    if m.op == "mul" and len(m.args) == 2 and m.args[0].op == "const" and m.args[0].shape == SCALAR:
        scale, m = m.args[0].attr, m.args[1]
    if m.op != "add" or len(m.args) != 2:
        return None
    x, y = m.args
    if y.op == "T" and y.args[0] is x and x.op != "T":
        return scale, x
    if x.op == "T" and x.args[0] is y and y.op != "T":
        return scale, y
    return None


def _display_order(e: Expr, keep=()) -> Expr:
    """A + Aᵀ rather than Aᵀ + A: in a sum, transposed terms after the others (named nodes
    in ``keep`` are left as they are)."""
    memo: dict = {}
    for n in ir.walk(e):
        if n in keep:
            memo[n] = n
            continue
        args = tuple(memo[a] for a in n.args)
        if n.op == "add":
            args = tuple(sorted(args, key=lambda t: t.op == "T"))
        memo[n] = n if args == n.args else Expr(n.op, args, n.attr, n.shape)
    return memo[e]


def _ones_text(n: Expr, latex: bool) -> str:
    """An array of one number c in a vec form: c times a column, row or matrix of ones, with
    its sizes (the ones as 1_a; ``2*1_a@1_b.T`` for an a×b matrix of twos)."""
    r, c = n.shape
    one = (lambda d: f"\\mathbf{{1}}_{{{_dims_tex(d)}}}") if latex else (lambda d: "1_" + _dims_label(d))
    tr = "^{\\top}" if latex else ".T"
    if c == 1:
        body = one(r)
    elif r == 1:
        body = one(c) + tr
    else:
        body = one(r) + ("" if latex else "@") + one(c) + tr
    from .printing import RawTex, number_tex, number_text

    if latex:
        return RawTex(body if n.attr == 1.0 else f"{number_tex(n.attr)} {body}")
    if n.attr == 1.0:
        return body if c == 1 else f"({body})"
    return f"({number_text(n.attr)[0]}*{body})"


def _unwrap(s: str) -> str:
    """s without one pair of parentheses around all of it (the argument of kron or vec)."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(s) - 1:
            return s  # (a)@(b): the first pair closes early
    return s[1:-1]


def _top_level_product(s: str) -> bool:
    """Whether text has a * or / outside parentheses (a ** power does not count)."""
    depth, i = 0, 0
    while i < len(s):
        ch = s[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == "/":
            return True
        elif depth == 0 and ch == "*":
            if s[i + 1:i + 2] == "*":
                i += 2
                continue
            return True
        i += 1
    return False


def _dims_tex(d) -> str:
    """A dimension as a LaTeX subscript: n, d_{1} (d1), a b (a product a*b)."""
    from .printing import tex_name

    return " ".join(tex_name(str(f)) for f in ir.dim_factors(d))


def _identity_name(d, latex: bool):
    """The identity of size d: I_n in text (I_(d1) for a longer name), I_{d_{1}} in LaTeX."""
    if not latex:
        return "I_" + _dims_label(d)
    from .printing import RawTex

    return RawTex(f"I_{{{_dims_tex(d)}}}")


def _dims_label(*ds) -> str:
    """Subscripts: pq for one-letter names, else bracketed: (4,3), (d1,d2)."""
    parts = [str(d) for d in ds]
    if all(len(p) == 1 and p.isalpha() for p in parts) or len(parts) == 1 and len(parts[0]) == 1:
        return "".join(parts)
    return "(" + ",".join(parts) + ")"


def _size_label(*ds) -> str:
    """The subscript of an identity of size d1·d2·…: ab, 12 (for 4·3), (4*a)."""
    ints = math.prod(d for d in ds if isinstance(d, int))
    names = [str(d) for d in ds if not isinstance(d, int)]
    if not names:
        return _dims_label(ints)
    if ints == 1:
        return _dims_label(*names) if all(len(n) == 1 for n in names) else "(" + "*".join(names) + ")"
    return "(" + "*".join([str(ints)] + names) + ")"


# ------------------------------------------------------------------ the rules

def _diag(h: Expr):
    """Diag(vec h) as a factor: a plain matrix Diag(h) for a vector (so it folds with the
    Kronecker factors around it), DiagV for a matrix h."""
    if h.shape[1] == 1 or h.shape[0] == 1:
        col = h if h.shape[1] == 1 else simplify(s_T(h))
        return Kron(ONE, ir.func("Diag", col))
    return DiagV(h)


def _r_add(e, forms, lin):
    out = []
    for a, f, l in zip(e.args, forms, lin):
        if not l:
            return None  # an affine term: not a linear map
        if a.shape != e.shape:  # a scalar broadcast over the sum's shape
            f = f.then(ColV(const(1.0, e.shape)))
        out.append(f)
    terms = [t for f in out for t in f.terms]
    return VecForm(terms, _rows(e), out[0].cols)


def _rows(e):
    return dims_of(e.shape[0]) + dims_of(e.shape[1])


def _r_mul(e, forms, lin):
    if sum(lin) != 1:
        return None
    i = lin.index(True)
    L, f = e.args[i], forms[i]
    others = [a for j, a in enumerate(e.args) if j != i]
    scalars = [a for a in others if a.shape == SCALAR]
    arrays = [a for a in others if a.shape != SCALAR]
    if scalars:
        f = f.scaled(simplify(s_mul(*scalars)))
    if not arrays:
        return f
    h = simplify(s_mul(*arrays))
    if L.shape == e.shape and h.shape == e.shape:
        return f.then(_diag(h))
    if L.shape == SCALAR and h.shape == e.shape:
        return f.then(ColV(h))
    return None


def _r_div(e, forms, lin):
    if lin[1]:
        return None
    L, C = e.args
    inv = simplify(s_div(const(1.0), C))
    f = forms[0]
    if C.shape == SCALAR:
        return f.scaled(inv)
    if L.shape == e.shape:
        return f.then(_diag(inv))
    if L.shape == SCALAR:
        return f.then(ColV(inv))
    return None


def _r_matmul(e, forms, lin):
    x, y = e.args
    if lin[0] and lin[1]:
        return None
    if lin[0]:  # vec(L Y) = (Yᵀ ⊗ I_p) vec L
        return forms[0].then(kron(simplify(s_T(y)), ir.eye(x.shape[0])))
    return forms[1].then(kron(ir.eye(y.shape[1]), x))  # vec(X L) = (I_r ⊗ X) vec L


def _r_T(e, forms, lin):
    p, q = e.args[0].shape
    if p == 1 or q == 1:
        return forms[0]
    return forms[0].then(Comm(p, q))


def _r_vec(e, forms, lin):
    """vec(vec(L)) = vec(L), and vec(vec⁻¹(l)) = l: the same map, its rows a column."""
    return VecForm(forms[0].terms, _rows(e), forms[0].cols)


_r_unvec = _r_vec


def _r_frob(e, forms, lin):
    if lin[0] and lin[1]:
        return None
    i = 0 if lin[0] else 1
    return forms[i].then(RowV(e.args[1 - i]))


def _r_reduce(e, f, mean: bool):
    """vec sum(L) = 1ᵀ vec L; along axis 0 (I_c ⊗ 1ᵀ) vec L, along axis 1 (1ᵀ ⊗ I_r) vec L."""
    from .ops import axis_count, count

    r, c = e.args[0].shape
    if e.attr is None:
        out = f.then(RowV(const(1.0, e.args[0].shape)))
        n = count(e.args[0].shape)
    elif e.attr == 0:
        out, n = f.then(kron(ir.eye(c), const(1.0, (1, r)))), axis_count((r, c), 0)
    else:
        out, n = f.then(kron(const(1.0, (1, c)), ir.eye(r))), axis_count((r, c), 1)
    return out.scaled(simplify(s_div(const(1.0), n))) if mean else out


def _r_sum(e, forms, lin):
    return _r_reduce(e, forms[0], False)


def _r_mean(e, forms, lin):
    return _r_reduce(e, forms[0], True)


def _r_tr(e, forms, lin):
    return forms[0].then(RowV(ir.eye(e.args[0].shape[0]))) if _full(e) else None


# each linear operator's vec rule is a field of its registry entry (ops), naming one of the above
VEC_RULES = {name: op.vec for name, op in REGISTRY.items() if op.vec is not None}


def _full(e: Expr) -> bool:
    """A reduction over every entry (not along an axis)."""
    return e.shape == SCALAR and len(e.args) == 1 and e.attr is None


def _diagonal_products(L: Expr, dW: Expr) -> Expr:
    """L with a product Diag(l)F…G that is a column (l the part linear in dW) as F…G ∘ l, and a
    row F…G Diag(l) as ((F…G)ᵀ ∘ l)ᵀ: Diag has no vec rule of its own (vec Diag(l) is no
    product of the forms here), an entrywise product has (Diag(h))."""
    def rewrite(n):
        if n.op != "matmul" or 1 not in n.shape:
            return n
        fs = ir.chain_factors(n)
        for i, col in ((0, True), (-1, False)):
            d, rest = fs[i], fs[1:] if col else fs[:-1]
            if d.op == "Diag" and (n.shape[1] == 1 if col else n.shape[0] == 1) and dW in ir.walk(d) \
                    and not any(dW in ir.walk(f) for f in rest):
                other = ir.chain_product(rest)
                return ir.mul(other, d.args[0]) if col else ir.T(ir.mul(ir.T(other), d.args[0]))
        return n

    return ir.rebuild([L], rewrite)[0]


def vec_form(L: Expr | None, dW: Expr, out_shape=None) -> VecForm | None:
    """The vec form J of vec(L[dW]) = J vec(dW), or None where none can be written.  L None
    is the zero map to ``out_shape``."""
    if L is None:
        r, c = out_shape or SCALAR
        return VecForm([], dims_of(r) + dims_of(c), dims_of(dW.shape[0]) + dims_of(dW.shape[1]))
    L = _diagonal_products(L, dW)
    linear: set = set()
    memo: dict = {}
    for n in ir.walk(L):
        if n is dW:
            linear.add(n)
            memo[n] = VecForm.identity(dW)
            continue
        lin = tuple(a in linear for a in n.args)
        if not any(lin):
            continue
        linear.add(n)
        rule = VEC_RULES.get(n.op)
        if rule is None:
            return None
        form = rule(n, [memo.get(a) for a in n.args], lin)
        if form is None:
            return None
        memo[n] = form
    if L not in memo:  # L does not contain dW: the zero map
        return VecForm([], _rows(L), dims_of(dW.shape[0]) + dims_of(dW.shape[1]))
    out = memo[L]
    out.rows = _rows(L)
    return out.canonical()


# ------------------------------------------------------------------ emitted helpers

HELPERS = {
    "_vec": '''def _vec(a):
    """vec(a), column-major (a scalar is a length-1 vector)."""
    return np.reshape(a, -1, order="F")
''',
    "_mat": '''def _mat(a, r, c):
    """a as an r×c array (a vector is a column or a row, a scalar 1×1)."""
    return np.reshape(np.asarray(a, dtype=float), (r, c))
''',
    "_kron": '''def _kron(b, a):
    """b ⊗ a; an int stands for the identity of that size."""
    if isinstance(b, int) and isinstance(a, int):
        return np.eye(a * b)
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int):  # block diagonal: b copies of a
        r, c = a.shape
        out = np.zeros((b, r, b, c))
        for i in range(b):
            out[i, :, i, :] = a
        return out.reshape(b * r, b * c)
    if isinstance(a, int):
        r, c = b.shape
        out = np.zeros((r, a, c, a))
        for i in range(a):
            out[:, i, :, i] = b
        return out.reshape(r * a, c * a)
    return np.kron(b, a)
''',
    "_kron_apply": '''def _kron_apply(b, a, m):
    """(b ⊗ a) m without the Kronecker product: a X bᵀ for each column vec(X) of m."""
    ac = a if isinstance(a, int) else a.shape[1]
    bc = b if isinstance(b, int) else b.shape[1]
    x = m.reshape(bc, ac, m.shape[1])  # x[j, i, col] = X_col[i, j]
    if not isinstance(a, int):
        x = np.matmul(a, x)
    if not isinstance(b, int):
        x = np.tensordot(b, x, axes=(1, 0))
    return x.reshape(x.shape[0] * x.shape[1], m.shape[1])  # (no -1: m may be empty)
''',
    "_comm": '''def _comm(m, p, q):
    """K_pq m: the rows of m permuted as vec(X) -> vec(Xᵀ) for a p×q X (K is never built)."""
    return np.ascontiguousarray(m.reshape(q, p, m.shape[1]).transpose(1, 0, 2)).reshape(p * q, m.shape[1])
''',
    "_symadd": '''def _symadd(a, c=1.0, block=64):
    """c (a + aᵀ), in square blocks that stay in cache (a plain a + a.T reads a.T with
    a stride of a row and is several times slower for large a)."""
    a = np.asarray(a, dtype=float)
    if a.ndim < 2:
        return 2.0 * c * a
    n = a.shape[0]
    if n <= block:
        out = a + a.T
    else:
        out = np.empty_like(a)
        for i in range(0, n, block):
            for j in range(0, n, block):
                np.add(a[i:i + block, j:j + block], a[j:j + block, i:i + block].T,
                       out=out[i:i + block, j:j + block])
    if c != 1.0:
        out *= c
    return out
''',
    "_xtdx": '''def _xtdx(x, d):
    """xᵀ Diag(d) x: a symmetric rank-k update of (√d ∘ x) when d ≥ 0 (half the work of
    a general product), else xᵀ(d ∘ x)."""
    if _SYRK is not None and x.shape[0] > 32 and np.all(d >= 0):
        y = np.sqrt(d)[:, None] * x
        c = _SYRK(1.0, y.T, trans=0, lower=0)  # yᵀy's upper triangle (y.T is Fortran order: no copy)
        return c + np.triu(c, 1).T
    return x.T.dot(d[:, None] * x)


try:
    from scipy.linalg.blas import dsyrk as _SYRK
except Exception:  # SciPy is optional: the general product then
    _SYRK = None
''',
}
