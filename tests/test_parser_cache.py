"""lark's analysis of each grammar is kept in a cache directory so a new process loads it; a
stale, corrupt or unwritable cache never changes what is parsed."""
import os

import pytest

from matcalc import parse

EXPRS = ["alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "sum(log(softmax(W@x, 0)))", "X'*A(:, 1)"]


def _fresh(name):
    return parse.grammar_parser.__wrapped__(name)  # not the process's own (lru-cached) parser


def _tree(p, text):
    try:
        return p.parse(text)
    except Exception as e:  # the same refusal from both parsers counts as the same result
        return type(e).__name__


@pytest.mark.parametrize("name", ["matcalc", "matlab"])
def test_the_cached_parser_parses_as_the_built_one(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MATCALC_CACHE_DIR", str(tmp_path))
    built = _fresh(name)
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].startswith(name)
    loaded = _fresh(name)
    for text in EXPRS:
        assert _tree(loaded, text) == _tree(built, text)


def test_a_corrupt_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("MATCALC_CACHE_DIR", str(tmp_path))
    reference = _fresh("matcalc")
    (path,) = tmp_path.iterdir()
    path.write_bytes(b"not a parser\n")
    again = _fresh("matcalc")
    assert _tree(again, EXPRS[0]) == _tree(reference, EXPRS[0])


def test_an_unwritable_cache_directory_is_no_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("MATCALC_CACHE_DIR", str(blocker / "cache"))  # below a file: cannot be made
    p = _fresh("matcalc")
    assert p.parse("a + b") is not None
    assert not (blocker / "cache").exists()
