"""The examples menu of the page (also what the load test asks)."""

EXAMPLES = [
    {"name": "VAE KL term", "expr": "alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "wrt": ["W"],
     "note": "the question matcalc was built for: ∂λ/∂W = α(p − 1)xᵀ with p = exp(Wx + c)"},
    {"name": "two-layer ReLU (VAE decoder)",
     "expr": "0.5*(exp(W1@relu(W0@x+b0)+b1) - (W1@relu(W0@x+b0)+b1) + m*m - 1):1", "wrt": ["W0"],
     "note": "backprop through relu: its derivative is step(z)"},
    {"name": "linear layer Y = XW", "expr": "G:(X@W)", "wrt": ["X", "W"],
     "shapes": "X=n,d; W=d,m", "note": "with G = ∂L/∂Y: ∂L/∂X = G Wᵀ, ∂L/∂W = Xᵀ G"},
    {"name": "torch's Y.backward(G) for Y = exp(XW)", "expr": "G:exp(X@W)", "wrt": ["X"],
     "note": "X.grad after Y.backward(G) is ∂(G:Y)/∂X"},
    {"name": "least squares", "expr": "(X@W - Y):(X@W - Y)", "wrt": ["W"],
     "note": "‖XW − Y‖²_F: ∂/∂W = 2Xᵀ(XW − Y)"},
    {"name": "Gaussian log-likelihood (logdet)", "expr": "logdet(X) - tr(inv(X)@S)", "wrt": ["X"],
     "note": "∂ logdet(X)/∂X = X⁻ᵀ"},
    {"name": "logistic loss", "expr": "sum(log(1 + exp(-y*(X@w))))", "wrt": ["w"],
     "note": "log(1 + exp(z)) is rewritten as softplus(z)"},
    {"name": "quadratic form", "expr": "x.T@A@x", "wrt": ["x"], "note": "(A + Aᵀ)x"},
]
