"""Questions as users of other tools write them (matrixcalculus.org's MATLAB syntax, SymPy's
matrix expressions, NumPy's pi), and wrong numbers found by probing: each against a closed
form or central differences."""
import warnings

import numpy as np
import pytest
import sympy as sp

import matcalc
from support.fd import central_fd_grad

RNG = np.random.default_rng(31)


def quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


# ---- wrong numbers

@pytest.mark.parametrize("expr, wrt, lam", [
    # like terms x:(y + β) + x:(y + β) were opened into x:y + x:β, β a number: x:β taken entry by entry
    ("(x:(y + beta))*(x:(y + beta))", "beta", lambda x, y, beta: (x @ (y + beta)) ** 2),
    ("(x:(y + beta))*(x:(y + beta))", "x", lambda x, y, beta: (x @ (y + beta)) ** 2),
    ("(x:(y + beta))*beta + beta*(x:(y + beta))", "beta", lambda x, y, beta: 2 * beta * (x @ (y + beta))),
    ("x:(beta - y)*(x:(beta - y))", "y", lambda x, y, beta: (x @ (beta - y)) ** 2),
])
def test_a_repeated_product_with_a_spread_number(expr, wrt, lam):
    vals = {"x": np.array([1.0, 2.0, 3.0]), "y": np.array([0.5, -1.0, 2.0]), "beta": 0.5}
    d = quiet(matcalc.derive, expr, wrt)
    np.testing.assert_allclose(d.function(**vals), central_fd_grad(lam, vals, wrt), rtol=1e-7)
    back = quiet(matcalc.jacobian, f"{d.text} + 0*{wrt}", wrt).value_function(**vals)  # (x:β did not read back)
    np.testing.assert_allclose(back, d.function(**vals), rtol=1e-12)


def test_a_repeated_matrix_product_with_a_spread_number():
    B = np.arange(6.0).reshape(2, 3)
    d = quiet(matcalc.derive, "sum(B*(B + beta))*sum(B*(B + beta))", "B")
    want = 2 * np.sum(B * (B + 0.5)) * (2 * B + 0.5)
    np.testing.assert_allclose(d.function(B=B, beta=0.5), want, rtol=1e-12)


def _entropy(p):
    s = np.exp(p - p.max())
    s /= s.sum()
    return s @ np.log(s)


@pytest.mark.parametrize("expr", ["softmax(p).T@log(softmax(p))", "softmax(p):log(softmax(p))",
                                  "softmax(p).T@(p - logsumexp(p))"])
def test_the_entropy_of_a_softmax_in_its_own_argument(expr):
    # softmax(p):logsumexp(p), a vector with a number, was emitted as a vector (NumPy) or
    # refused (torch, jax: matmul of a 0-d array); the Hessian raised an internal error
    p = np.array([0.5, -1.0, 2.0])
    s = np.exp(p) / np.exp(p).sum()
    closed = s * (np.log(s) - s @ np.log(s))  # d(sᵀ log s) = (log s + 1):ds, ds = (Diag(s) - s sᵀ)dp
    d = matcalc.derive(expr, "p")
    np.testing.assert_allclose(d.function(p=p), closed, rtol=1e-12)
    h = matcalc.hessian(expr, "p")
    H = h.matrix(p=p)
    fd = np.array([(matcalc.derive(expr, "p").function(p=p + 1e-6 * e) - d.function(p=p - 1e-6 * e)) / 2e-6
                   for e in np.eye(3)]).T
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-8)


def test_matlab_transpose_and_power_are_one_level_left_to_right():
    # X.^2' is (X.^2)' in MATLAB; it was read X.^(2')
    X, A = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
    d = matcalc.derive("tr(X.^2'*A)", "X", syntax="matlab")
    np.testing.assert_allclose(d.function(X=X, A=A), 2 * A * X, rtol=1e-12)  # tr((X∘X)ᵀA) = (X∘X):A
    d = matcalc.derive("tr(X'.^2*A)", "X", syntax="matlab")
    np.testing.assert_allclose(d.function(X=X, A=A), 2 * A * X, rtol=1e-12)  # (Xᵀ∘Xᵀ):Aᵀ... = (X∘X):A
    x, y = RNG.standard_normal(4), RNG.standard_normal(4)
    d = matcalc.derive("x.^2'*y", "x", syntax="matlab")
    assert d.text == "2*y.*x"
    np.testing.assert_allclose(d.function(x=x, y=y), 2 * x * y, rtol=1e-12)


# ---- the identity, pi and other names

def test_a_shape_declared_for_I_sizes_the_identity_and_says_so():
    with pytest.warns(matcalc.NotationWarning, match="I is the identity matrix"):
        d = matcalc.derive("tr(I@X)", "X", shapes={"I": ("n", "n"), "X": ("n", "n")})
    assert d.text == "I"
    with pytest.raises(matcalc.MatcalcError, match="identity matrix, but it is declared to be of shape n×m"):
        matcalc.derive("tr(I@X)", "X", shapes={"I": ("n", "m"), "X": ("n", "n")})
    n = sp.Symbol("n")
    with pytest.raises(matcalc.MatcalcError, match="would read as matcalc's identity"):
        matcalc.derive(sp.Trace(sp.MatrixSymbol("I", n, n) * sp.MatrixSymbol("X", n, n)), "X")


def test_pi_is_the_number_unless_declared():
    x = RNG.standard_normal(4)
    d = matcalc.derive("sum(x**2)/(2*pi)", "x")
    np.testing.assert_allclose(d.function(x=x), x / np.pi, rtol=1e-14)
    assert d.text == "1/pi*x"
    back = matcalc.derive(f"({d.text}):x/2", "x")  # the text reads back with pi the number
    np.testing.assert_allclose(back.function(x=x), x / np.pi, rtol=1e-14)
    d = matcalc.derive("sum(pi*log(pi))", "pi", shapes={"pi": ("n",)})  # a policy π, declared
    p = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(d.function(pi=p), np.log(p) + 1, rtol=1e-14)
    with pytest.raises(matcalc.MatcalcError, match="pi is the number π unless its shape is declared"):
        matcalc.derive("sum(pi*x)", "pi")
    # the letter π too (it was a symbol the function asked for), and the hint where it is all there is
    d = matcalc.derive("sum(exp(-x**2/2)/sqrt(2*π))", "x")
    np.testing.assert_allclose(d.function(x=x), -x * np.exp(-x ** 2 / 2) / np.sqrt(2 * np.pi), rtol=1e-14)
    p = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(matcalc.derive("sum(π*log(π))", "π", shapes={"π": ("n",)}).function(π=p),
                               np.log(p) + 1, rtol=1e-14)
    for name in ("pi", "π"):
        with pytest.raises(matcalc.MatcalcError, match=f"{name} is the number π unless its shape is declared"):
            matcalc.derive(f"sum({name}*log({name}))", name)
    d = matcalc.derive(sp.pi * sp.Trace(sp.MatrixSymbol("X", 3, 3)), "X")
    np.testing.assert_allclose(d.function(X=np.zeros((3, 3))), np.pi * np.eye(3), rtol=1e-14)


@pytest.mark.parametrize("expr, text, latex", [
    ("sum(erf(x))", "2/sqrt(pi)*exp(-x**2)", "\\tfrac{2}{\\sqrt{\\pi}}"),
    ("sum(exp(-x**2/2)/sqrt(2*pi))", "-1/sqrt(2*pi)*exp(-0.5*x**2)*x", "\\tfrac{1}{\\sqrt{2\\pi}}"),
    ("sum(x)/sqrt(2)", "1/sqrt(2)", "\\tfrac{1}{\\sqrt{2}}"),
])
def test_numbers_of_pi_and_square_roots_print_as_written(expr, text, latex):
    d = matcalc.derive(expr, "x")
    assert d.text == text and latex in d.latex
    x = RNG.standard_normal(3)
    back = matcalc.jacobian(f"{d.text} + 0*x", "x")  # the text reads back to the same numbers
    np.testing.assert_allclose(np.broadcast_to(back.value_function(x=x), (3,)), d.function(x=x), rtol=1e-14)


def test_a_definition_may_be_the_identity():
    A = RNG.standard_normal((3, 3))
    d = matcalc.derive("tr(Q@A) + sum(R*A)", "A", definitions={"Q": "I", "R": "2*I + Q"})
    np.testing.assert_allclose(d.function(A=A), 4 * np.eye(3), rtol=1e-14)
    with pytest.raises(matcalc.MatcalcError, match="in the definition of Q .*cannot tell the size of I"):
        matcalc.derive("sum(A) + sum(Q)", "A", definitions={"Q": "I"})


# ---- SymPy input everywhere, and more of its nodes

def test_hessian_and_jacobian_take_sympy_expressions():
    n = sp.Symbol("n")
    x, M = sp.MatrixSymbol("x", n, 1), sp.MatrixSymbol("M", n, n)
    Mv, xv = RNG.standard_normal((3, 3)), RNG.standard_normal(3)
    np.testing.assert_allclose(matcalc.hessian((x.T * M * x)[0, 0], x).matrix(M=Mv, x=xv), Mv + Mv.T, rtol=1e-14)
    np.testing.assert_allclose(matcalc.jacobian(M * x, x).matrix(M=Mv, x=xv), Mv, rtol=1e-14)


def test_sympy_kronecker_diagonal_and_adjoint_nodes():
    n, m = sp.Symbol("n"), sp.Symbol("m")
    A, X, x = sp.MatrixSymbol("A", n, n), sp.MatrixSymbol("X", m, m), sp.MatrixSymbol("x", m, 1)
    Av, Xv, xv = RNG.standard_normal((2, 2)), RNG.standard_normal((3, 3)), RNG.standard_normal(3)
    d = matcalc.derive(sp.Trace(sp.KroneckerProduct(A, X)), X)  # tr(A⊗X) = tr(A) tr(X)
    np.testing.assert_allclose(d.function(A=Av, X=Xv), np.trace(Av) * np.eye(3), rtol=1e-14)
    d = matcalc.derive(sp.Trace(sp.DiagMatrix(x) * X), x)  # Σ xᵢ Xᵢᵢ
    np.testing.assert_allclose(d.function(x=xv, X=Xv), np.diag(Xv), rtol=1e-14)
    d = matcalc.derive(sp.Trace(sp.Adjoint(X) * X), X)  # real: tr(XᵀX)
    np.testing.assert_allclose(d.function(X=Xv), 2 * Xv, rtol=1e-14)


# ---- the adjoints of a Kronecker product where its blocks are known

@pytest.mark.parametrize("expr, wrt, text, closed", [
    ("tr(kron(A, X))", "X", "tr(A)*I", lambda A, X: np.trace(A) * np.eye(3)),
    ("tr(kron(A, X))", "A", "tr(X)*I", lambda A, X: np.trace(X) * np.eye(2)),
    ("sum(kron(A, X))*tr(X)", "A", "tr(X)*sum(X)*1", lambda A, X: np.trace(X) * X.sum() * np.ones((2, 2))),
    ("sum(kron(A, X))*tr(X)", "X", "sum(A)*(sum(X)*I + tr(X))",
     lambda A, X: A.sum() * (X.sum() * np.eye(3) + np.trace(X) * np.ones((3, 3)))),
])
def test_kronecker_adjoints_fold(expr, wrt, text, closed):
    shapes = {"A": ("n", "n"), "X": ("m", "m")}
    d = matcalc.derive(expr, wrt, shapes=shapes)
    assert d.text == text
    A, X = RNG.standard_normal((2, 2)), RNG.standard_normal((3, 3))
    np.testing.assert_allclose(d.function(A=A, X=X), closed(A, X), rtol=1e-12)


def test_a_transposed_product_of_transposes():
    X, A = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
    d = matcalc.derive("tr(X.T**2@A)", "X")
    assert d.text == "2*A*X"  # was 2*(A.T*X.T).T
    np.testing.assert_allclose(d.function(X=X, A=A), 2 * A * X, rtol=1e-12)


# ---- NumPy's, Julia's, MATLAB's and SymPy's spellings

def test_a_1d_vector_on_the_left_of_a_matrix_is_numpys_x_at_A():
    A, x, y = RNG.standard_normal((4, 4)), RNG.standard_normal(4), RNG.standard_normal(4)
    d = matcalc.derive("x @ A @ x", "x")  # NumPy: x@A of a 1-D x is xᵀA
    np.testing.assert_allclose(d.function(A=A, x=x), (A + A.T) @ x, rtol=1e-12)
    W, b = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
    d = matcalc.derive("sum(exp(x@W + b))", "W", shapes={"b": ("m",)})
    np.testing.assert_allclose(d.function(W=W, x=x, b=b), np.outer(x, np.exp(x @ W + b)), rtol=1e-12)
    with pytest.raises(matcalc.MatcalcError, match="λ must be a scalar"):
        matcalc.derive("x@A", "A")
    with pytest.raises(matcalc.MatcalcError, match="inner dimensions 1 and b differ"):  # MATLAB: refused
        matcalc.derive("x*A*x", "x", syntax="matlab")


@pytest.mark.parametrize("expr, syntax, hint", [
    ("sum(exp.(x))", "matcalc", "exp.(...) is Julia's broadcast"),
    ("sum(sin.(x) .* cos.(y))", "matlab", "sin.(...) is Julia's broadcast"),
    ("sum(expm(X))", "matcalc", "no matrix exponential"),
    ("sum(log10(x))", "matcalc", "log(x)/log(10)"),
    ("norm(x, 3)", "matcalc", "norm(x), norm(x, 2) and norm(x, 1) of a vector are norm2(x) and norm1(x)"),
    ("norm(X, 2) + x:x", "matcalc", "a matrix's 2-norm (its largest singular value) and other orders are not"),
    ("a'*X*b", "matlab", "a–g are numbers, as on matrixcalculus.org: declare a, b vectors (--shape a=m --shape b=n; "),
    ("a'*inv(X)*b", "matlab", "(--shape a=n --shape b=n; "),
    ("tr(X^T*A*x)", "matlab", "in the MATLAB syntax the transpose is X'"),
    ("sum(X\\x)", "matcalc", "is inv(A)@b"),
    ("(B@x + b)'*C*(D@x + d)", "matcalc", "write (B@x + b)'@C@(D@x + d)"),
    ("sum(X(:)) + x:x", "matcalc", "X(:), every entry of X in one column, is vec(X)"),
    ("sum(X(:)) + x'*x", "matlab", "X(:), every entry of X in one column, is vec(X)"),
    ("sum(ndtr(x))", "matcalc", "the normal CDF Φ(z) is 0.5*erfc(-z/sqrt(2))"),
    ("sum(log_ndtr(x))", "matcalc", "log Φ(z) is log(0.5*erfc(-z/sqrt(2))), computed stably"),
    ("std(x)", "matcalc", "write sqrt(mean((x - mean(x))**2))"),
    ("sum(gamma(x))", "matcalc", "gamma(x) is exp(gammaln(x)) for x > 0, and log(gamma(x)) is gammaln(x)"),
    ("norm(x, 3)", "matlab", "norm(x), norm(x, 2) and norm(x, 1) of a vector are norm2(x) and norm1(x)"),
    ("exp(A@x)", "matcalc", "jacobian (matcalc jacobian) differentiates an array-valued F"),
    # names whose closest spelling here is another function (swish was "did you mean sinh?")
    ("sum(swish(x))", "matcalc", "swish(x) is silu(x)"),
    ("sum(atanh(x))", "matcalc", "write 0.5*log((1 + x)/(1 - x))"),
    ("sum(round(x))", "matcalc", "its derivative 0 wherever it has one"),
    ("sum(pos(x))", "matcalc", "pos(x) is relu(x)"),
    ("sumsq(x)", "matcalc", "write sum(x**2), or x:x"),
    ("sum(ReLU(x))", "matcalc", "write relu(...), in lower case"),
    ("sum(torch.inverse(X)@x)", "matcalc", "write inv(...) without the torch. prefix"),
    ("dot(x, y)", "matlab", "write x'*y"),
    ("x'A*x", "matlab", "* (matrix) or .* (entry by entry)"),
])
def test_hints_for_other_tools_spellings(expr, syntax, hint):
    with pytest.raises(matcalc.MatcalcError) as e:
        matcalc.derive(expr, "x", syntax=syntax)
    assert hint in str(e.value)


@pytest.mark.parametrize("syntax", ["matcalc", "matlab"])
def test_eye_of_a_size_is_the_identity_of_that_size(syntax):
    X = RNG.standard_normal((3, 3))
    prod = "@" if syntax == "matcalc" else "*"
    d = matcalc.derive(f"logdet(eye(3) + X{prod}X')", "X", syntax=syntax)
    np.testing.assert_allclose(d.function(X=X), 2 * np.linalg.inv(np.eye(3) + X @ X.T) @ X, rtol=1e-12)
    d = matcalc.derive("tr(inv(eye(size(X, 0)) + X))", "X", shapes={"X": (3, 3)})
    A = np.linalg.inv(np.eye(3) + X)
    np.testing.assert_allclose(d.function(X=X), -(A @ A).T, rtol=1e-12)
    # a declared dimension's name as the size (np.eye(n), np.ones(n)); undeclared, a hint
    d = matcalc.derive("logdet(eye(n) + X@X.T) + x.T@ones(n)", "X", shapes={"X": ("n", "d"), "x": ("n",)})
    np.testing.assert_allclose(d.function(X=X, x=X[0]), 2 * np.linalg.inv(np.eye(3) + X @ X.T) @ X, rtol=1e-12)
    with pytest.raises(matcalc.ShapeError, match="n is a size where it names a dimension of a declared shape"):
        matcalc.derive("x.T@ones(n)", "x")
    with pytest.raises(matcalc.ShapeError, match="eye\\(3, 4\\) is not square"):
        matcalc.derive("sum(X*eye(3, 4))", "X")
    with pytest.raises(matcalc.ShapeError):  # (a size that X does not have)
        matcalc.derive("sum(X@eye(4))", "X", shapes={"X": (3, 3)})


@pytest.mark.parametrize("syntax", ["matcalc", "matlab"])
def test_norm_of_a_vector_with_its_order_is_numpys_and_matlabs(syntax):
    x, A = np.array([0.5, -2.0, 1.5]), RNG.standard_normal((4, 3))
    y = RNG.standard_normal(4)  # (b would be a number in the MATLAB syntax)
    prod = "@" if syntax == "matcalc" else "*"
    power = "**" if syntax == "matcalc" else "^"
    d = matcalc.derive(f"norm(A{prod}x - y, 1) + norm(x, 2){power}2", "x", syntax=syntax)
    np.testing.assert_allclose(d.function(A=A, x=x, y=y), A.T @ np.sign(A @ x - y) + 2 * x, rtol=1e-14)
    d = matcalc.derive("norm(x, 2)", "x", syntax=syntax)
    np.testing.assert_allclose(d.function(x=x), x / np.linalg.norm(x, 2), rtol=1e-14)


@pytest.mark.parametrize("name, f", [("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan)])
def test_asin_acos_atan_are_the_arc_functions(name, f):
    x = np.array([0.1, -0.3, 0.5])
    d = matcalc.derive(f"sum({name}(x))", "x")
    np.testing.assert_allclose(d.function(x=x), central_fd_grad(lambda x: f(x).sum(), {"x": x}, "x"), rtol=1e-7)


def test_a_dense_matrix_too_large_for_memory_is_a_refusal():
    import subprocess
    import sys

    resource = pytest.importorskip("resource")
    code = ("import resource, numpy as np, matcalc\n"
            "resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, resource.RLIM_INFINITY))\n"
            "j = matcalc.jacobian('softmax(X, 0)', 'X')\n"
            "try:\n    j.matrix(X=np.zeros((200, 200)))\n"
            "except matcalc.OutOfMemory as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused:" in out.stdout and "jvp and vjp" in out.stdout, out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize("expr, wrt, want", [
    # the printed text lost the shape of an array of ones: norm1(1), 1@1 read back as other numbers
    ("alpha*norm1(exp(D - D))", "alpha", lambda D, C: D.size),
    ("alpha*norm2(exp(D - D))", "alpha", lambda D, C: np.sqrt(D.size)),  # size(D, 0), not sqrt(size(D, 0)**2)
    ("alpha*norm2(exp(C - C))", "alpha", lambda D, C: np.sqrt(C.size)),
    ("sum(D@exp(C - C))", "D", lambda D, C: C.shape[1] * np.ones_like(D)),
    ("sum(D@softmax(C - C, 1))", "D", lambda D, C: np.ones_like(D)),
])
def test_texts_of_arrays_of_ones_read_back(expr, wrt, want):
    shapes = {"D": ("m", "m"), "C": ("m", "p")}
    vals = {"D": RNG.standard_normal((4, 4)), "C": RNG.standard_normal((4, 3)), "alpha": 0.3}
    d = matcalc.derive(expr, wrt, shapes=shapes)
    got = d.function(**{k: v for k, v in vals.items() if k in d.function.params})
    np.testing.assert_allclose(got, want(vals["D"], vals["C"]), rtol=1e-12)
    back = quiet(matcalc.jacobian, f"{d.text} + 0*{wrt}", wrt, shapes=shapes)
    args = {k: v for k, v in vals.items() if k in back.value_function.params}
    np.testing.assert_allclose(back.value_function(**args), got, rtol=1e-12)


def test_a_written_out_sigmoid_is_the_sigmoid():
    # 1/(1 + exp(-z)) gave exp(-z)/(exp(-z) + 1)**2: NaN at z = -800
    z = np.array([-800.0, -1.0, 0.0, 2.0, 800.0])
    d = matcalc.derive("sum(1/(1 + exp(-z)))", "z")
    assert d.text == "sigmoid(z)*(1 - sigmoid(z))"
    s = 0.5 * (1 + np.tanh(z / 2))
    np.testing.assert_allclose(d.function(z=z), s * (1 - s), rtol=1e-12, atol=1e-300)
    d = matcalc.derive("sum(2/(3 + exp(-z)))", "z")
    zz = z[1:4]
    np.testing.assert_allclose(d.function(z=zz), central_fd_grad(lambda z: np.sum(2 / (3 + np.exp(-z))), {"z": zz}, "z"),
                               rtol=1e-7)


@pytest.mark.parametrize("expr, text, closed", [
    ("norm2(x)**4", "8*(x:dx)*x + 4*norm2(x)**2*dx", lambda x: 8 * np.outer(x, x) + 4 * (x @ x) * np.eye(4)),
    ("norm2(x)", "(dx - (x:dx)*x/norm2(x)**2)/norm2(x)",  # was (x/norm2(x):dx)
     lambda x: (np.eye(4) - np.outer(x, x) / (x @ x)) / np.linalg.norm(x)),
])
def test_a_scalar_denominator_comes_out_of_a_frobenius_product(expr, text, closed):
    h = matcalc.hessian(expr, "x")
    assert h.text == text
    x = RNG.standard_normal(4)
    np.testing.assert_allclose(h.matrix(x=x), closed(x), rtol=1e-12)


def test_numbers_print_without_pi_where_pi_is_a_symbol():
    # 2/sqrt(pi)*pi*exp(-x**2): two pi's in one text, one the number, one the user's symbol
    d = matcalc.derive("pi*sum(erf(x))", "x", shapes={"pi": ()})
    assert "sqrt(pi)" not in d.text and "\\sqrt{\\pi}" not in d.latex
    x = np.array([0.5, 1.0])
    back = matcalc.derive(f"({d.text}):v", "v", shapes={"pi": ()})
    np.testing.assert_allclose(back.function(x=x, pi=1.0, v=np.zeros(2)), d.function(x=x, pi=1.0), rtol=1e-14)
    assert matcalc.derive("sum(pi**2*x*x)", "x").text == "2*pi**2*x"
    assert matcalc.derive("sum(2*sqrt(2)*x*x)", "x").text == "4*sqrt(2)*x"  # not 8/sqrt(2)


def test_an_identity_sized_by_a_dimension_no_symbol_has_is_refused():
    # the size n reached the emitted code, which had no argument for it (KeyError: 'n')
    with pytest.raises(matcalc.MatcalcError, match="its declared size n is not the size of any symbol"):
        matcalc.derive("tr(I)*sum(x)", "x", shapes={"I": ("n", "n")})
    d = matcalc.derive("tr(I)*sum(x)", "x", shapes={"I": (3, 3)})
    np.testing.assert_allclose(d.function(x=np.ones(4)), 3 * np.ones(4))


def test_an_entrywise_function_of_a_transpose_transposes_back():
    X, G = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    j = matcalc.jacobian("(X.T*exp(X.T)).T", "X")
    assert j.text == "dX*exp(X)*(X + 1)"  # was (dX.T*exp(X.T)*(X.T + 1)).T
    d = matcalc.derive("G:(X.T*exp(X.T)).T + sum(cos(X.T))", "X")
    assert d.text == "G*X*exp(X) + G*exp(X) - sin(X)"  # (no transpose left)
    np.testing.assert_allclose(d.function(X=X, G=G), G * np.exp(X) * (X + 1) - np.sin(X), rtol=1e-12)


@pytest.mark.parametrize("expr, wrt, text", [
    ("alpha*x.T@x", "alpha", "x.T@x"),  # was sum(x**2), where the question wrote x.T@x
    ("(x.T@y)**2/(x.T@x*y.T@y)", "x",  # was … sum(y**2) … (y.T@y)**2: one quantity, two spellings
     "2*((x.T@y)*y/((x.T@x)*y.T@y) - (x.T@y)**2*x/((x.T@x)**2*y.T@y))"),
])
def test_the_squared_norm_of_a_vector_reads_as_its_inner_product(expr, wrt, text):
    d = matcalc.derive(expr, wrt)
    assert d.text == text
    x, y = RNG.standard_normal(4), RNG.standard_normal(4)
    lam = {"alpha": lambda alpha, x, y: alpha * x @ x,
           "x": lambda alpha, x, y: (x @ y) ** 2 / (x @ x * (y @ y))}[wrt]
    vals = {"alpha": 0.7, "x": x, "y": y}
    got = d.function(**{k: v for k, v in vals.items() if k in d.function.params})
    np.testing.assert_allclose(got, central_fd_grad(lam, vals, wrt), rtol=1e-6)


def test_a_hessian_and_a_jacobian_in_a_definition():
    # the Hessian of a loss in the logits was refused ("Z is a definition, not a variable")
    defs = {"Z": "X@W", "P": "softmax(Z, 1)"}
    h = matcalc.hessian("-sum(Y*log(P))", "Z", definitions=defs)
    Z, Y = RNG.standard_normal((3, 4)), np.eye(4)[[0, 2, 1]]

    def grad(Z):  # the textbook gradient in the logits: softmax(Z) - Y (rows of Y sum to 1)
        return np.exp(Z) / np.exp(Z).sum(1, keepdims=True) - Y

    fd = np.zeros((12, 12))
    for j in range(12):
        E = np.zeros(12)
        E[j] = 1e-6
        E = E.reshape(3, 4, order="F")
        fd[:, j] = ((grad(Z + E) - grad(Z - E)) / 2e-6).reshape(-1, order="F")
    np.testing.assert_allclose(h.matrix(Z=Z, Y=Y), fd, atol=1e-8)
    j = matcalc.jacobian("softmax(Z, 1)", "Z", definitions={"Z": "X@W"})
    V = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(j.jvp(V, Z=Z), (fd @ V.reshape(-1, order="F")).reshape(3, 4, order="F"), atol=1e-8)
    with pytest.raises(matcalc.MatcalcError, match="Z is a definition: a Hessian or Jacobian is taken"):
        matcalc.hessian("-sum(Y*log(P))", ["Z", "W"], definitions=defs)


def test_logdet_of_a_kronecker_product():
    # log det(A⊗B) = m log det A + n log det B; its gradient printed kron_blocks(inv(kron(A, B)).T, B)
    shapes = {"A": ("n", "n"), "B": ("m", "m")}
    A = 2 * np.eye(2) + 0.3 * RNG.standard_normal((2, 2))
    B = 2 * np.eye(3) + 0.3 * RNG.standard_normal((3, 3))
    d = matcalc.derive("logdet(kron(A, B))", "A", shapes=shapes)
    assert d.text == "size(B, 0)*inv(A).T"
    np.testing.assert_allclose(d.function(A=A, B=B), 3 * np.linalg.inv(A).T, rtol=1e-12)
    d = matcalc.derive("tr(inv(kron(A, B)))", "A", shapes=shapes)  # tr(A⁻¹) tr(B⁻¹)
    Ai = np.linalg.inv(A)
    np.testing.assert_allclose(d.function(A=A, B=B), -np.trace(np.linalg.inv(B)) * (Ai @ Ai).T, rtol=1e-10)


def test_logsumexp_and_softmax_of_a_spread_number():
    # logsumexp(alpha*1) printed without its count: the text read back as alpha, not alpha + log(m)
    shapes = {"z": ("m",), "x": ("n",)}
    d = matcalc.derive("logsumexp(z - z + alpha)*sum(x)", "x", shapes=shapes)
    assert d.text == "(alpha + log(size(z, 0)))*1"
    vals = {"z": np.zeros(4), "alpha": 0.7, "x": np.zeros(3)}
    np.testing.assert_allclose(d.function(**vals), (0.7 + np.log(4)) * np.ones(3), rtol=1e-14)
    back = matcalc.jacobian(f"({d.text}) + 0*x", "x", shapes=shapes)
    np.testing.assert_allclose(back.value_function(**vals), d.function(**vals), rtol=1e-14)
    d = matcalc.derive("y:softmax(z - z + alpha)", "y", shapes={"z": ("m",)})
    np.testing.assert_allclose(d.function(y=np.zeros(4), z=np.zeros(4), alpha=0.3), np.full(4, 0.25), rtol=1e-14)


def test_an_identity_in_a_definition_nothing_uses_needs_no_size():
    d = matcalc.derive("sum(B)", "B", definitions={"Q": "I"})
    np.testing.assert_allclose(d.function(B=np.ones((2, 3))), np.ones((2, 3)))


def test_a_spread_sum_in_a_matrix_product_keeps_its_ones():
    # (E - E + beta + 2)@B.T printed (beta + 2)@B.T, which reads as a scalar @ a matrix
    shapes = {"E": ("n", "m"), "B": ("n", "m"), "A": ("n", "n")}
    d = matcalc.derive("(E - E + beta + 2)@B.T:A", "A", shapes=shapes)
    B = np.arange(12.0).reshape(3, 4)
    want = 2.5 * np.ones((3, 4)) @ B.T
    np.testing.assert_allclose(d.function(E=np.zeros((3, 4)), B=B, A=np.zeros((3, 3)), beta=0.5), want)
    back = matcalc.jacobian(f"({d.text}) + 0*A", "A", shapes=shapes)
    np.testing.assert_allclose(back.value_function(B=B, A=np.zeros((3, 3)), beta=0.5), want)


@pytest.mark.parametrize("expr", ["sum(inv(kron(A, C))@kron(A, C))", "tr(inv(kron(A, C))@kron(A, C))",
                                  "sum(kron(A, C)@inv(kron(A, C)))"])
def test_a_kronecker_product_times_its_inverse_is_still_the_identity(expr):
    # rewriting inv(kron(A, C)) as kron(inv(A), inv(C)) first kept inv(X)@X = I from applying
    shapes = {"A": ("n", "n"), "C": ("m", "m")}
    assert matcalc.derive(expr, "A", shapes=shapes).text == "0"
    assert matcalc.hessian(expr, "A", shapes=shapes).text == "0"


def test_powers_of_transposes_transpose_back():
    X, W = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    d = matcalc.derive("alpha*sum((X.T*sin(W.T)).T*X)", "W")
    assert d.text == "alpha*X**2*cos(W)"  # was alpha*(X.T**2).T*cos(W)
    np.testing.assert_allclose(d.function(alpha=0.5, X=X, W=W), 0.5 * X ** 2 * np.cos(W), rtol=1e-12)


def test_eye_of_a_dimension_declared_only_as_a_factor_of_another():
    # a stacked LQR cost: u has t*k entries, eye(t) names t where only t*k is declared
    d = matcalc.derive("u.T@kron(eye(t), R)@u", "R", shapes={"R": ("k", "k"), "u": ("t*k",)})
    u = np.arange(6.0)
    U = u.reshape(3, 2).T  # (vec⁻¹: column-major, k rows)
    np.testing.assert_allclose(d.function(u=u, R=np.eye(2)), U @ U.T, rtol=1e-14)
