"""The streaming step of torch_chunked (kernels/fold.py): compiled and eager agree with each other
and with float64, on every kind of tile the loop makes, and a failed compile falls back, saying so."""

import math
import warnings

import pytest
import torch

from entropy_lens.kernels import attention_entropy, attention_with_entropy, fold_status
from entropy_lens.kernels import fold as fold_module
from entropy_lens.kernels.fold import COMPILE_MIN, FoldState, compiled, fold, fold_for

NEG_INF = float("-inf")


def _tiles(seed=0):
    """(name, s, m, l, u): a first tile, a later tile with a new max, masked entries, whole rows with
    no key yet, and a state that starts from a sink (m = σ, l = 1)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(60, 16, generator=g) * 4
    shape = s.shape[:-1]
    first = (torch.full(shape, NEG_INF), torch.zeros(shape), torch.zeros(shape))
    later = (
        torch.randn(shape, generator=g) * 4,
        torch.rand(shape, generator=g) * 3 + 1,
        torch.randn(shape, generator=g),
    )
    masked = s.clone()
    masked[..., 9:] = NEG_INF
    masked[7:19] = NEG_INF  # rows of this tile that see no key
    sink = (torch.full(shape, 0.7), torch.ones(shape), torch.zeros(shape))
    return [
        ("first", s, *first),
        ("later", s, *later),
        ("masked first", masked, *first),
        ("masked later", masked, *later),
        ("sink start", masked, *sink),
    ]


def _fold64(s, m, l, u):
    """The same step in float64 from its definition: l' = Σ_all e^(x − c), u' = Σ_all e^(x − c)(x − c)
    over the old rows' (m, l, u) and the tile, with c the new max (0 while nothing is seen)."""
    s, m, l, u = (t.double() for t in (s, m, l, u))
    m_new = torch.maximum(m, s.amax(-1))
    c = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    e = torch.where(torch.isinf(s), torch.zeros_like(s), torch.exp(s - c.unsqueeze(-1)))
    ed = torch.where(torch.isinf(s), torch.zeros_like(s), e * (s - c.unsqueeze(-1)))
    alpha = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(m - c))
    return m_new, alpha * l + e.sum(-1), alpha * (u + (m - c) * l) * (l > 0) + ed.sum(-1), e


# torch.compile's first build of the fold takes a minute on 2 cores: the compiled cases are slow
@pytest.mark.parametrize(
    "use_compiled", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"]
)
@pytest.mark.parametrize("case", range(5))
def test_fold_matches_float64(case, use_compiled):
    name, s, m, l, u = _tiles()[case]
    fn = compiled() if use_compiled else fold
    got = fn(s.clone(), m, l, u)
    want = _fold64(s, m, l, u)
    for a, b, what in zip(got[:4], want, ("m", "l", "u", "e")):
        assert torch.equal(torch.isinf(a), torch.isinf(b)), (name, what)
        fin = torch.isfinite(b)
        torch.testing.assert_close(a[fin].double(), b[fin], atol=2e-5, rtol=2e-6, msg=f"{name} {what}")
    if use_compiled:
        assert fold_status() == "compiled"


@pytest.mark.slow  # compiled() imports torch._dynamo (seconds)
def test_only_large_cpu_tiles_are_compiled_and_only_when_asked(monkeypatch):
    small, large = torch.zeros(4, 16), torch.zeros(COMPILE_MIN // 64, 64)
    monkeypatch.delenv(fold_module.ENV_VAR, raising=False)
    assert fold_for(large) is fold and fold_status() == "eager"  # the default
    monkeypatch.setenv(fold_module.ENV_VAR, "1")
    assert fold_for(small) is fold and fold_for(large) is compiled()


@pytest.mark.slow
def test_compiled_and_eager_agree_on_a_long_causal_case(monkeypatch):
    """The whole loop (entropy and output, GQA, a padding mask, uneven blocks, tiles on both sides of
    COMPILE_MIN) with either fold."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, h, 300, 16, generator=g) * 2 for h in (4, 2, 2))
    blocks = {"block_q": 128, "block_k": 128}  # full tiles: 2·4·128·128 scores >= COMPILE_MIN
    keep = torch.ones(2, 300, dtype=torch.bool)
    keep[1, :41] = False
    args = {"causal": True, "mask": keep[:, None, None, :]}
    got = {}
    for env in ("1", "0"):
        monkeypatch.setenv(fold_module.ENV_VAR, env)
        rows = attention_with_entropy(q, k, v, softmax_scale=0.25, backend="torch_chunked", **blocks, **args)
        out, h = rows.out, rows["entropy"]
        got[env] = (out, h, attention_entropy(q, k, softmax_scale=0.25, **blocks, **args))
        assert fold_status() == ("compiled" if env == "1" else "eager")
    want = attention_entropy(q, k, softmax_scale=0.25, backend="reference", **args)
    for env in ("1", "0"):
        out, h, h_sep = got[env]
        assert (h - want).abs().max().item() <= 1e-5 and (h_sep - want).abs().max().item() <= 1e-5
    torch.testing.assert_close(got["1"][0], got["0"][0], atol=1e-5, rtol=0)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q,
        k.repeat_interleave(2, 1),
        v.repeat_interleave(2, 1),
        attn_mask=keep[:, None, None, :] & torch.ones(300, 300, dtype=torch.bool).tril(),
        scale=0.25,
    ).transpose(1, 2)
    real = keep  # rows of padding queries are sdpa's business, not compared
    torch.testing.assert_close(got["1"][0][real], sdpa[real], atol=1e-5, rtol=0)


def test_a_failed_compile_falls_back_to_eager_and_says_why():
    def broken(fn, **kw):
        def call(*a):
            raise RuntimeError("no C++ compiler found\nmore detail")

        return call

    state = FoldState(compile=broken)  # a state of its own: the process's fold is left alone
    _, s, m, l, u = _tiles()[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(state)(s.clone(), m, l, u)
        compiled(state)(s.clone(), m, l, u)  # a later call does not try again
    assert fold_status(state) == "eager (torch.compile failed: RuntimeError: no C++ compiler found)"
    assert fold_status() != fold_status(state)
    assert len(caught) == 1 and "runs uncompiled" in str(caught[0].message)
    want = fold(s.clone(), m, l, u)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert not math.isnan(float(got[2].sum()))
