"""Test support: the random-expression generator with its own NumPy oracle, and finite differences."""
