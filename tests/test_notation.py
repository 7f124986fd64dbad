"""The silent trap (a * between matrices that only type-checks by making them equal-shaped)
is named, and MATLAB / NumPy spellings that matcalc does not read are refused with a hint."""
import re
import warnings

import numpy as np
import pytest

import matcalc
from matcalc import NotationWarning, ParseError, ShapeError, cli


def notes_of(expr, wrt, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = matcalc.derive(expr, wrt=wrt, **kw)
    return d, [w.message for w in caught if issubclass(w.category, NotationWarning)]


def test_notation_warning_is_a_user_warning():
    assert issubclass(NotationWarning, UserWarning)


def test_hadamard_trap_of_a_matrix_chain():
    d, notes = notes_of("tr(A*X'*B*X*C)", "X")
    assert len(notes) == 1  # one note for the whole chain
    msg = str(notes[0])
    assert "A@X'@B@X@C" in msg and "entrywise" in msg
    assert notes[0].column == 4
    assert msg.splitlines()[-1].index("^") == 2 + 3
    # the answer is still the Hadamard one (what was typed), correct as such
    assert d.check().ok


def test_elementwise_inverse_trap():
    d, notes = notes_of("x.T@W^-1@x", "x")
    assert len(notes) == 1 and "inv(W)" in str(notes[0]) and "W^-1" in str(notes[0])
    # and the result is what was typed: the entrywise reciprocal
    rng = np.random.default_rng(0)
    W, x = rng.uniform(0.5, 2, (3, 3)), rng.standard_normal(3)
    R = 1 / W
    assert np.allclose(d.function(W=W, x=x), (R + R.T) @ x)


@pytest.mark.parametrize("expr,wrt", [
    ("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W"),   # m*m: one symbol
    ("sum(x*y)", "x"),                           # vectors: * is the entrywise product people mean
    ("sum(A∘B)", "A"),                           # ∘ says Hadamard on purpose
    ("G:exp(X@W)*(X@W)", "W"),                   # equal shapes already
    ("sum(alpha*A)", "A"),                       # a scalar scales
    ("sum((X@W-Y)**2)", "W"),                    # an entrywise square is common and meant
])
def test_no_note_where_nothing_is_suspicious(expr, wrt):
    _, notes = notes_of(expr, wrt)
    assert notes == []


def test_declared_equal_shapes_give_no_note():
    _, notes = notes_of("sum(A*B)", "A", shapes={"A": ("n", "m"), "B": ("n", "m")})
    assert notes == []


def test_cli_prints_the_note_on_stderr_and_succeeds(capsys):
    code = cli.run(["derive", "tr(A*X'*B*X*C)", "--wrt", "X"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "note:" in err and "@" in err and "column 4" in err
    assert "∂λ/∂X" in out and "note" not in out


@pytest.mark.parametrize("expr,words,col", [
    ("sum(A.*B)", [".*", "entrywise", "--syntax matlab"], 6),
    ("x.^2:1", [".^", "**"], 2),
    ("sum(x./y)", ["./", "write /"], 6),
    ("sum(np.exp(x))", ["exp(...)", "np."], 7),
    ("sum(torch.tanh(x))", ["tanh(...)", "torch."], 10),
])
def test_parse_hints(expr, words, col):
    with pytest.raises(ParseError) as info:
        matcalc.derive(expr, wrt="x")
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    assert info.value.column == col


def test_mismatched_star_hints_at_matmul():
    with pytest.raises(ShapeError) as info:
        matcalc.derive("sum(A*x)", wrt="x", shapes={"A": (3, 4), "x": (4,)})
    assert "use @" in str(info.value)
    assert info.value.column == 5


def test_e_to_a_vector_hints_exp():
    with pytest.raises(ShapeError) as info:
        matcalc.derive("e^l:1", wrt="l")
    assert "exp(l)" in str(info.value)


def test_e_to_a_scalar_is_noted():
    _, notes = notes_of("sum(e^alpha)", "alpha")
    assert notes and "exp(alpha)" in str(notes[0])


def test_cli_refusal_hint_exit_2(capsys):
    code = cli.run(["derive", "sum(A.*B)", "--wrt", "A"])
    _, err = capsys.readouterr()
    assert code == 2 and ".*" in err and "^" in err.splitlines()[-1]


def test_a_name_that_usually_is_a_number_gets_a_note_when_it_is_a_vector():
    with pytest.warns(matcalc.NotationWarning, match="eps is a vector by the spelling of its name"):
        matcalc.derive("sum(x/sqrt(x:x + eps))", wrt="x")
    with warnings.catch_warnings():
        warnings.simplefilter("error", matcalc.NotationWarning)
        matcalc.derive("sum(x/sqrt(x:x + eps))", wrt="x", shapes={"eps": ()})  # declared: no note


def test_a_caret_T_beside_a_symbol_named_T_gets_a_note():
    # alpha^T + T: ^T is the transpose, though a power of the symbol T was likely meant
    with pytest.warns(matcalc.NotationWarning, match=r"alpha\^T is read as a transpose .* alpha\*\*T"):
        assert matcalc.derive("alpha^T + T", "alpha", shapes={"T": ()}).text == "1"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matcalc.derive("x^T@A@x", "x")  # no T anywhere else: no note


@pytest.mark.parametrize("name", ["ϵ", "ϑ", "ϕ", "ϖ", "ϱ", "ϰ", "ϝ", "varrho", "varsigma", "varpi", "varkappa",
                                  "digamma", "ε", "θ"])
def test_every_spelling_of_a_greek_letter_is_a_number(name):
    # ϵ (LaTeX's \\epsilon), ϑ, ϕ and the var- names were vectors: x + ϵ was a sum of two vectors
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = matcalc.derive(f"sum(log(x + {name}))", name)
    assert d.user_shapes[name] == () and d.shape == ()
    x = np.array([0.5, 1.0, 3.0])
    assert d.function(x=x, **{name: 0.25}) == pytest.approx(np.sum(1 / (x + 0.25)), rel=1e-12)


def test_a_definition_nothing_uses_beside_a_symbol_of_a_like_name_is_noted():
    with pytest.warns(matcalc.NotationWarning, match="the definition of l is not used by the expression "
                                                     r"\(did you mean L"):
        d = matcalc.derive("sum(exp(L))", "L", definitions={"l": "W@x"})
    assert d.text == "exp(L)"
    import warnings

    with warnings.catch_warnings():  # one dict of definitions for several questions: no note
        warnings.simplefilter("error")
        matcalc.derive("sum(exp(x))", "x", definitions={"z": "W@x"})


def test_norm_is_the_2_norm_and_frobenius_as_numpys_default():
    # norm(x - a) was refused ("write norm2(x)"): the spelling most users try first
    import numpy as np

    rng = np.random.default_rng(8)
    x, a, X = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal((3, 5))
    g = matcalc.derive("norm(x - a)", "x").function(x=x, a=a)
    np.testing.assert_allclose(g, (x - a) / np.linalg.norm(x - a), rtol=1e-12)
    np.testing.assert_allclose(matcalc.derive("norm(X)**2", "X").function(X=X), 2 * X, rtol=1e-12)
    with pytest.raises(matcalc.MatcalcError, match=r"norm takes one argument here .*norm1\(x\)"):
        matcalc.derive("norm(x, 3)", "x")  # (norm(x, 1) is norm1(x))
    # MATLAB's norm of a matrix is the spectral norm: refused there, a vector's is the 2-norm
    with pytest.raises(matcalc.MatcalcError, match="largest singular value.*norm2\\(X\\)"):
        matcalc.derive("norm(X)", "X", syntax="matlab")
    g = matcalc.derive("norm(x - h)", "x", syntax="matlab").function(x=x, h=a)
    np.testing.assert_allclose(g, (x - a) / np.linalg.norm(x - a), rtol=1e-12)


def test_a_vector_spread_over_columns_says_what_numpy_does():
    # X@W + b with b undeclared: a column, one entry per row of X@W (per sample), where NumPy
    # adds a 1-D b to each row: silently different numbers where X@W is square
    with pytest.warns(NotationWarning, match=r"b is a column .* NumPy pairs a 1-D b with every row .* "
                                             r"write b\.T") as caught:
        d = matcalc.derive("-sum(Y*log(softmax(X@W + b, 1)))", "b")
    assert d.text == "0"  # softmax(·, 1) ignores a per-row constant: said so too
    assert any("∂λ/∂b is 0 everywhere" in str(w.message) for w in caught)
    with pytest.warns(NotationWarning, match=r"b is a column"):
        matcalc.derive("sum((X@W + b)**2)", "W")
    with warnings.catch_warnings():  # a declared vector, or b.T: what was written is what was meant
        warnings.simplefilter("error", NotationWarning)
        matcalc.derive("sum(tanh(W@X + b))", "b", shapes={"b": ("m",)})
        matcalc.derive("-sum(Y*log(softmax(X@W + b.T, 1)))", "b")
    # called with NumPy's bias (one entry per column): the shape error says to write b.T
    import numpy as np

    for f in (matcalc.derive("sum((X@W + b)**2)", "W").function,
              matcalc.value_and_grad("sum((X@W + b)**2)", wrt=["W"]).function):
        with pytest.raises(matcalc.ShapeError, match=r"NumPy adds a 1-D b to every row: for that write b\.T"):
            f(X=np.ones((5, 3)), W=np.ones((3, 4)), b=np.ones(4))
    # a declared vector the length of the columns is refused, with NumPy's reading to write
    with pytest.raises(matcalc.MatcalcError, match=r"to add b to every row, as NumPy does with a 1-D array, "
                                                   r"write b\.T"):
        matcalc.derive("sum((X@W + b)**2)", "W", shapes={"X": ("n", "d"), "W": ("d", "m"), "b": ("m",)})


def test_a_column_met_by_a_row_says_how_numpy_pairs_1d_arrays():
    # x.T*y and mean(X, 0) - u make matrices; with 1-D arrays NumPy pairs the entries
    with pytest.warns(NotationWarning, match=r"every pair of their entries.*write x in place of x\.T"):
        matcalc.derive("sum(x.T*y)", "x")
    with pytest.warns(NotationWarning, match=r"write mean\(X, 0\)\.T in place of mean\(X, 0\)"):
        matcalc.derive("sum((mean(X, 0) - u)**2)", "X")
    with pytest.warns(NotationWarning, match=r"write 2\*x in place of 2\*x\.T"):  # (was 2*x.T.T)
        matcalc.derive("sum(2*x.T*y)", "x")


def test_a_gate_defined_by_an_entrywise_function_is_no_suspicious_hadamard_factor():
    # a GRU's (1 - z)*H + z*hh with z, r, hh defined as sigmoid(...) and tanh(...): three notes
    # said "for a matrix product write z@hh"; a product of plain symbols keeps its note
    defs = {"z": "sigmoid(Wz@X + Uz@H + bz)", "r": "sigmoid(Wr@X + Ur@H + br)", "hh": "tanh(Wh@X + Uh@(r*H) + bh)"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotationWarning)
        matcalc.derive("G:((1 - z)*H + z*hh)", "Wz", definitions=defs,
                       shapes={"bz": ("h",), "br": ("h",), "bh": ("h",)})  # (undeclared: a note on NumPy's bias)
    with pytest.warns(NotationWarning, match="for a matrix product write A@B"):
        matcalc.derive("sum(A*B)", "A")


def test_a_greek_constant_added_to_an_array_is_not_noted_but_mu_is():
    # every layer norm's var + epsilon and triplet margin + alpha was noted "adds the number"
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotationWarning)
        matcalc.derive("sum(sqrt(x*x + epsilon))", "x")
        matcalc.derive("sum(relu(x - y + alpha))", "x")
    with pytest.warns(NotationWarning, match="adds the number mu to every entry"):
        matcalc.derive("sum((x - mu)**2)", "x")


def test_a_printed_row_broadcast_reads_back_without_a_note():
    # exp(X*(1@r))*(1@r), matcalc's own gradient text, read back with "write X@(1@r)"
    shapes = {"X": ("N", "n"), "r": (1, "n")}
    d = matcalc.derive("sum(exp(X*r))", wrt="X", shapes=shapes)
    assert "1@r" in d.text
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotationWarning)
        matcalc.derive(f"Z:({d.text})", wrt="Z", shapes=shapes)


def test_a_vector_times_a_matrix_entrywise_says_what_it_does_and_ell_is_noted():
    # "giving X and u the same shape (a×b)": u keeps its length and scales X's rows
    with pytest.warns(NotationWarning, match=r"multiplies row i of X by entry i of u, which it only does by giving u "
                                             r"as many entries as X has rows; NumPy multiplies column j by entry j of "
                                             r"a 1-D u: for that write X\*u\.T; for a matrix product write X@u"):
        matcalc.derive("sum(X*u)", "X")
    with warnings.catch_warnings():  # a declared row (a layer norm's gain): spread over the rows as meant
        warnings.simplefilter("error", NotationWarning)
        matcalc.derive("G:(gamma*X)", "X", shapes={"gamma": (1, "p")})
    # a length scale ell left undeclared is a vector spread over D's columns
    with pytest.warns(NotationWarning, match="ell is a vector by the spelling of its name"):
        matcalc.derive("y.T@exp(-D/(2*ell**2))@y", wrt="D")


def test_a_declared_mask_or_an_entrywise_power_is_no_suspicious_hadamard_factor():
    # masked factorisation, implicit-feedback weights, a graph's Dirichlet energy: "for a
    # matrix product write M@(Y - U@V.T)" on the loss as it is always written
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotationWarning)
        matcalc.derive("norm2(M*(Y - U@V.T))**2", "V", shapes={"M": ("n", "m")})
        matcalc.derive("sum(C*(P - U@V.T)**2)", "U")
        matcalc.derive("sum(W*(x@1.T - 1@x.T)**2)", "x", shapes={"W": ("n", "n")})
    with pytest.warns(NotationWarning, match="for a matrix product write X@W"):  # two plain names keep it
        matcalc.derive("sum(X*W)", "W", shapes={"X": ("n", "m")})
    with warnings.catch_warnings():  # an undeclared mask or one-hot labels on a layer's product
        warnings.simplefilter("error", NotationWarning)
        matcalc.derive("G:(M*(X@W))", "W")
        matcalc.derive("sum(relu(1 - Y*(X@W)))", "W")


def test_every_pair_of_a_vector_s_entries_is_meant_entrywise():
    # x - x.T (a graph's differences): no "write x in place of x.T" (x - x is 0), and W*(x - x.T)
    # or W*(x@1.T) is no suspicious Hadamard product
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        matcalc.derive("sum(W*(x - x.T)**2)", "x")
        matcalc.derive("y:sum(W*(x@1.T), 1)", "y")
        matcalc.derive("sum(W*(x - x.T))", "x")
        matcalc.derive("sum(softplus(Z) - Y*(X@W + b.T))", "W")  # a layer's value with its bias: entrywise
    text = " ".join(str(w.message) for w in caught)
    assert "in place of x.T" not in text and "matrix product" not in text


def test_a_hadamard_note_stays_where_the_star_alone_fixes_a_shape():
    # a declared factor against a call or a product, a power of a symbol (MATLAB's A*X^2):
    # X's shape comes from * only, so the note on @ stays
    for expr, wrt, shapes in (("tr(A*inv(X))", "X", {"A": ("n", "n")}), ("tr(X**2*A)", "X", None),
                              ("sum(A*B**2)", "A", None)):
        with pytest.warns(NotationWarning, match="for a matrix product write"):
            matcalc.derive(expr, wrt, shapes=shapes)


def test_the_zero_gradient_of_a_second_spread_vector_says_it_all():
    # only the first spread vector has its note: the second's zero gradient said "the note on c"
    with pytest.warns(NotationWarning, match=r"∂λ/∂c is 0 everywhere: c is a column .* write c\.T"):
        matcalc.derive("sum(X@V + e) + sum(log(softmax(X@W + c, 1))*Y)", "c")
    with warnings.catch_warnings(record=True) as caught:  # lengths declared apart: no 1-D pairing to write
        warnings.simplefilter("always")
        matcalc.derive("sum(x - y.T)", "x", shapes={"x": ("n",), "y": ("m",)})
    assert not any("in place of" in str(w.message) for w in caught)


def test_a_greek_name_transposed_before_a_vector_gets_the_declaration_hint():
    # finance's mu.T@w: "to scale by a scalar use *" only, where w.T@mu said mu is a number by its name
    with pytest.raises(ShapeError, match=r"mu is a number by its Greek name; to make it a vector declare it"):
        matcalc.derive("0.5*w.T@Sigma@w - mu.T@w", "w")
    with pytest.raises(ShapeError) as info:  # W@mu.T would need mu a row: no such hint (and no internal error)
        matcalc.derive("sum(W@mu.T)", "W")
    assert "Greek" not in str(info.value)


def test_the_argument_of_diag_is_a_vector_even_with_a_greek_name():
    # factor analysis: logdet(W@W.T + Diag(psi)) was W@W.T + psi on every entry (psi a number)
    d, notes = notes_of("logdet(W@W.T + Diag(psi))", "psi", shapes={"W": (4, 3)})
    assert any("psi is read as a vector, the diagonal of Diag(psi)" in str(n) for n in notes)
    rng = np.random.default_rng(0)
    W, psi = rng.standard_normal((4, 3)), rng.uniform(0.5, 2, 4)
    lam = lambda p: np.linalg.slogdet(W @ W.T + np.diag(p))[1]  # noqa: E731
    fd = [(lam(psi + 1e-6 * e) - lam(psi - 1e-6 * e)) / 2e-6 for e in np.eye(4)]
    np.testing.assert_allclose(d.function(W=W, psi=psi), fd, atol=1e-8)
    # MATLAB's diag of a vector, with a name that is a number by that syntax's naming
    d, notes = notes_of("x'*diag(d)*x", "x", syntax="matlab")
    x, dd = rng.standard_normal(3), rng.standard_normal(3)
    np.testing.assert_allclose(d.function(x=x, d=dd), 2 * dd * x)
    assert any("d is read as a vector" in str(n) and "MATLAB" in str(n) for n in notes)


@pytest.mark.parametrize("expr", ["logdet(W@W.T + Diag(psi))", "x.T@Diag(psi)@x", "sum(X*Diag(psi))"])
def test_diag_of_a_declared_number_met_by_an_array_is_refused_with_the_way_to_write_it(expr):
    with pytest.raises(ShapeError) as e:
        matcalc.derive(expr, wrt="psi", shapes={"psi": ()})
    assert "Diag(psi) of a number is that number, 1×1: for psi on the diagonal write psi*I" in str(e.value)
    assert matcalc.derive("tr(Diag(psi))", "psi", shapes={"psi": ()}).text == "1"  # (alone it is psi)


@pytest.mark.parametrize("expr, wrt, words", [
    # a product by a Greek number that NumPy would refuse (w@mu)
    ("sum(w@mu)", "w", "w@mu multiplies by the number mu (mu is a number by its Greek name"),
    # ones times a Greek number: that number, where a vector makes the outer product (a mean spread over rows)
    ("sum((X - 1@mu.T)**2)", "X", "1@mu.T is the number mu, not an outer product (mu is a number by its Greek name"),
    # a Greek name's square added to arrays (a VAE's KL term in its mean): the number mu, squared
    ("-0.5*sum(1 + logv - mu**2 - exp(logv))", "mu", "adds the number mu**2 to every entry (mu is a number"),
    # X**k in a matrix product or a trace: entrywise, where papers mean the matrix power
    ("tr(X^3)", "X", "X^3 raises every entry of X to the power 3; for the matrix power write X@X@X"),
    ("logdet(A**2)", "A", "for the matrix power write A@A"),
    ("tr((A + X)**2)", "X", "for the matrix power write (A + X)@(A + X)"),
    # / and @ bind equally: the whole chain after the quotient is named, once
    ("x.T@A@x/x.T@B@x", "x", "is (x.T@A@x/x.T)@B@x; for a quotient write (x.T@A@x)/(x.T@B@x)"),
    ("1/x.T@x", "x", "for a quotient write 1/(x.T@x)"),
    # a count or size spelled as a vector, as a divisor (a GMM moment's /n, attention's /sqrt(d))
    ("(Z.T@(y - X@b)/n).T@W@(Z.T@(y - X@b)/n)", "b", "divides entry by entry by the vector n"),
    ("G:(softmax(Q@K.T/sqrt(d), 1)@V)", "Q", "for a count or a size declare it a number: shapes={'d': ()}"),
])
def test_readings_python_gives_that_papers_do_not_are_noted(expr, wrt, words):
    _, notes = notes_of(expr, wrt)
    assert len(notes) == 1 and words in str(notes[0]), notes


@pytest.mark.parametrize("expr, wrt, shapes", [
    ("sum(X**2)", "X", None), ("tr(X.T@X**2)", "X", {"X": (3, 4)}), ("(x.T@A@x)/(x.T@x)", "x", None),
    ("sum(X**-2)", "X", {"X": (5, 3)}),  # (not square: no inverse to point at)
    ("sum(alpha*x - epsilon**2)", "x", None), ("sum((X/Y)@Z)", "X", None),
    # not known square: a row norm's or a feature's square; a divisor that is not a row before a column
    ("sum(X**2@w)", "X", None), ("norm2(W@X**2 - Y)**2", "W", None), ("sum(2*(X/S@W))", "X", None),
    ("norm2(W**2@v)", "W", {"W": ("n", "n")}),  # (a layer's variances: entrywise meant in a product)
    ("sum((X - mean(X, 0))/s.T@W)", "X", None), ("sum(exp(X)/sum(exp(X), 1)@W)", "X", None),
    # Greek numbers inside what is added: log(sigma), mu**2 in an expanded square
    ("sum(log(sigma) + (x - m)**2/(2*sigma**2))", "x", None), ("sum(x**2 - 2*mu*x + mu**2)", "x", None),
    ("sum(x/n)", "x", {"n": ()}), ("x.T@n", "x", None)])
def test_no_note_on_sums_of_squares_parenthesised_quotients_or_non_square_powers(expr, wrt, shapes):
    _, notes = notes_of(expr, wrt, shapes=shapes)
    assert not [n for n in notes if "power" in str(n) or "bind equally" in str(n) or "adds the number" in str(n)
                or "divides entry by entry" in str(n)]


@pytest.mark.parametrize("expr, syntax, words", [
    ("w@mu - gamma*w@S@w", "matcalc", "mu is a number by its Greek name: declared a vector (shapes={'mu': ('n',)}"),
    ("mu'*w/sqrt(w'*S*w)", "matlab", "mu is a number by its Greek name: declared a vector"),
    ("mu@w - gamma/2*w.T@S@w", "matcalc", "mu is a number by its Greek name; to make it a vector declare it"),
    ("sum(softplus(-R@w - t))/(n*(1 - beta)) + t", "matcalc",
     "t and n are vectors by the spelling of their names: declared numbers (shapes={'t': (), 'n': ()}"),
    ("sum(w)/N", "matcalc", "N is a matrix by the spelling of its name (upper case): declared a number"),
])
def test_a_refusal_names_the_names_whose_spelling_gave_the_wrong_shape(expr, syntax, words):
    with pytest.raises(ShapeError) as e:
        matcalc.derive(expr, "w", syntax=syntax)
    assert words in str(e.value)
    # and the declaration it gives makes the question work
    decl = {"mu": ("n",)} if "mu" in words else {"N": ()} if "N" in words else {"t": (), "n": ()}
    assert matcalc.derive(expr, "w", syntax=syntax, shapes=decl).gradient.shape[1] == 1


@pytest.mark.parametrize("expr, grad", [
    ("x.T@(1@1.T)@x", lambda x: 2 * np.sum(x) * np.ones_like(x)),  # the ones matrix results print (was 1×1)
    ("x.T@1@1.T@x", lambda x: 2 * np.sum(x) * np.ones_like(x)),
])
def test_ones_read_as_results_print_them(expr, grad):
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(matcalc.derive(expr, "x").function(x=x), grad(x), rtol=1e-14)


def test_an_axis_given_as_numpy_or_torch_name_it():
    rng = np.random.default_rng(4)
    X, Y, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    for expr in ("sum(X, axis=0)@y", "sum(X, 0)@y", "sum(X, axis=0, keepdims=True)@y"):
        np.testing.assert_allclose(matcalc.derive(expr, "X").function(X=X, y=y), np.outer(np.ones(3), y))
    P = np.exp(X - X.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    g = matcalc.derive("sum(softmax(X, dim=-1)*Y)", "X").function(X=X, Y=Y)
    np.testing.assert_allclose(g, P * (Y - np.sum(Y * P, 1, keepdims=True)), rtol=1e-12)
    with pytest.raises(ParseError, match="a plain argument after a keyword argument"):
        matcalc.derive("sum(X, axis=0, 1)@y", "X")


@pytest.mark.parametrize("expr,numpy_f", [
    ("sum(maximum(W@x, 0))", lambda W, x, y: np.sum(np.maximum(W @ x, 0))),
    ("sum(maximum(0, W@x - y))", lambda W, x, y: np.sum(np.maximum(0, W @ x - y))),
    ("sum(maximum(W@x, y)**2)", lambda W, x, y: np.sum(np.maximum(W @ x, y) ** 2)),
    ("sum(minimum(W@x, y)*y)", lambda W, x, y: np.minimum(W @ x, y) @ y),
    ("sum(minimum(0.5, W@x))", lambda W, x, y: np.sum(np.minimum(0.5, W @ x))),
    ("sum(max(0, 1 - y*(W@x)))", lambda W, x, y: np.sum(np.maximum(0, 1 - y * (W @ x)))),
    ("sum(min(-1, W@x)**2)", lambda W, x, y: np.sum(np.minimum(-1, W @ x) ** 2)),
    ("sum(maximum(0.1*(W@x), W@x))", lambda W, x, y: np.sum(np.maximum(0.1 * (W @ x), W @ x))),
])
def test_numpy_s_maximum_and_minimum_compare_entry_by_entry(expr, numpy_f):
    # "unknown function maximum (write relu(x - y) + y)": the spelling of a hinge or a clip most NumPy users type
    rng = np.random.default_rng(5)
    W, x, y = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal(4)
    d = matcalc.derive(expr, "W", shapes={"W": ("m", "n"), "x": ("n",), "y": ("m",)})
    got = d.function(**{k: v for k, v in {"W": W, "x": x, "y": y}.items() if k in d.symbols})
    h, fd = 1e-6, np.zeros_like(W)
    for i in np.ndindex(W.shape):
        E = np.zeros_like(W)
        E[i] = h
        fd[i] = (numpy_f(W + E, x, y) - numpy_f(W - E, x, y)) / (2 * h)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("expr,words", [
    ("sum(max(X, 0))", "np.max(X, 0) is a largest entry along an axis"),
    ("sum(maximum(x))", "takes two arguments"),
    ("sum(np.maximum(x, 0))", "write maximum(...) without the np. prefix"),
])
def test_maximum_spellings_that_are_not_read_say_why(expr, words):
    with pytest.raises(matcalc.MatcalcError, match=re.escape(words)):
        matcalc.derive(expr, "x" if "x" in expr else "X")


def test_a_declared_dimension_s_name_is_its_size_where_a_symbol_would_not_type():
    # sum((X@w - y)**2)/n with X declared (n, d) read n as a vector: "λ must be a scalar"
    rng = np.random.default_rng(4)
    X, w, y = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal(5)
    with pytest.warns(NotationWarning, match="n is read as the size n in X's declared shape"):
        d = matcalc.derive("sum((X@w - y)**2)/n", "w", shapes={"X": ("n", "d"), "w": ("d",), "y": ("n",)})
    np.testing.assert_allclose(d.function(X=X, w=w, y=y), 2 * X.T @ (X @ w - y) / 5, rtol=1e-12)
    # a matrix-normal likelihood: T, the number of columns of Y, counts the logdet
    Y, R, m = rng.standard_normal((3, 4)), rng.standard_normal((3, 3)), rng.standard_normal(3)
    S = R @ R.T + 3 * np.eye(3)
    with pytest.warns(NotationWarning, match="T is read as the size T"):
        d = matcalc.derive("0.5*tr(inv(S)@(Y - m@ones(T).T)@(Y - m@ones(T).T).T) + 0.5*T*logdet(S)", "S",
                           shapes={"Y": ("n", "T"), "S": ("n", "n"), "m": ("n",)})
    E, Si = Y - m[:, None], np.linalg.inv(S)
    np.testing.assert_allclose(d.function(Y=Y, S=S, m=m), -0.5 * Si @ E @ E.T @ Si + 2 * Si, rtol=1e-10)
    # a size is a count: in sqrt or log, not in a matrix function
    with pytest.raises(ShapeError):
        matcalc.derive("sum(x**2)*inv(n)", "x", shapes={"x": ("n",)})
    with pytest.warns(NotationWarning, match="n is read as the size n"):
        d = matcalc.derive("sum(x**2)/sqrt(n)", "x", shapes={"x": ("n",)})
    np.testing.assert_allclose(d.function(x=np.ones(4)), np.ones(4))
    # where the symbol reading works it stays: a bias b beside a dimension b
    d = matcalc.derive("sum(W@x + b)", "W", shapes={"W": ("a", "b"), "x": ("b",)})
    assert d.symbols["b"].shape == ("a", 1)


@pytest.mark.parametrize("expr,wrt,want", [
    ("2*1.T@x", "x", lambda x, W: 2 * np.ones(4)),
    ("alpha*1.T@W@x", "x", lambda x, W: 0.7 * W.T @ np.ones(3)),
    ("x.T@1*1.T@x", "x", lambda x, W: 2 * x.sum() * np.ones(4)),
    ("1.T*2@x", "x", lambda x, W: 2 * np.ones(4)),
    ("-1.T@x", "x", lambda x, W: -np.ones(4)),
    ("sum(W@(2*1))", "W", lambda x, W: 2 * np.ones((3, 4))),
    ("x.T@(alpha/4*1)", "x", lambda x, W: 0.7 / 4 * np.ones(4)),
    ("(2*1).T@x", "x", lambda x, W: 2 * np.ones(4)),
    ("(1/4*1).T@W@x", "x", lambda x, W: W.T @ np.ones(3) / 4),
])
def test_a_scaled_one_before_or_after_at_is_a_vector_of_ones(expr, wrt, want):
    # 2*1.T@x was refused: "cannot multiply 2*1.T (scalar) @ x ... (to scale by a scalar use *)"
    rng = np.random.default_rng(6)
    x, W = rng.standard_normal(4), rng.standard_normal((3, 4))
    d = matcalc.derive(expr, wrt, shapes={"x": ("n",), "W": ("m", "n")} if "W" in expr else {"x": ("n",)})
    got = d.function(**{k: v for k, v in {"x": x, "W": W, "alpha": 0.7}.items() if k in d.symbols})
    np.testing.assert_allclose(got, want(x, W), rtol=1e-13)


def test_a_defined_vector_spread_over_columns_gets_no_numpy_note():
    # mu = mean(X, 1) is a column by its definition; the note told to declare mu, which is refused
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = matcalc.derive("sum(G*(X - mu))", "X", definitions={"mu": "mean(X, 1)"})
    G = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(d.function(G=G, X=np.ones((2, 3))), G - G.mean(1, keepdims=True), rtol=1e-13)


def test_maximum_and_minimum_are_exact_where_their_arguments_differ_greatly_and_in_matlab_syntax():
    # read as a + relu(b - a), maximum(-1e17, 1) was 0 and its gradient in b 0
    x, y = np.array([-1e17, -1e8]), np.array([1.0, 1e-8])
    value, grads = matcalc.value_and_grad("sum(maximum(x, y)**2)", ["x", "y"]).function(x=x, y=y)
    np.testing.assert_allclose(value, 1.0 + 1e-16, rtol=1e-15)
    np.testing.assert_array_equal(grads["x"], [0.0, 0.0])
    np.testing.assert_allclose(grads["y"], 2 * y, rtol=1e-15)
    # a tie takes the second argument's derivative, as relu(z) = maximum(z, 0) does at 0
    tie = matcalc.derive("sum(maximum(x, y))", "y").function(x=np.ones(2), y=np.ones(2))
    np.testing.assert_array_equal(tie, [1.0, 1.0])
    # a row over a matrix's rows, as NumPy broadcasts np.maximum(X, b[None, :]) and + does here
    X, b = np.arange(6.0).reshape(2, 3) - 2.5, np.array([0.5, -1.0, 0.0])
    g = matcalc.derive("sum(maximum(X, b.T)**2)", "b", shapes={"X": ("m", "n"), "b": ("n",)}).function(X=X, b=b)
    np.testing.assert_allclose(g, np.sum(2 * np.maximum(X, b) * (X <= b), 0), rtol=1e-14)
    d = matcalc.derive("sum(max(x, y))", "x", syntax="matlab")  # MATLAB's max(A, B) is entrywise
    np.testing.assert_array_equal(d.function(x=np.array([1.0, -1.0]), y=np.zeros(2)), [1.0, 0.0])
