"""Values and derivatives at extreme but finite inputs, against values worked out in
mpmath at 50 digits."""
import warnings

import mpmath
import numpy as np

import matcalc

mpmath.mp.dps = 50


def test_gelu_stays_exact_far_on_the_negative_side():
    # 1 + erf(x/√2) cancelled to 0 for x below about -8: gelu(-30) was 0
    x = np.array([-30.0, -10.0, -1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = matcalc.jacobian("gelu(x)", "x").value_function
    want = [float(mpmath.mpf(v) / 2 * mpmath.erfc(-mpmath.mpf(v) / mpmath.sqrt(2))) for v in x]
    np.testing.assert_allclose(f(x=x), want, rtol=1e-13)
    assert f(x=x)[0] < 0
