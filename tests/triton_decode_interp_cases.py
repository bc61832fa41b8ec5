"""The decode step's split-key launch (kernels/triton_decode.py) against the float64 reference under the
interpreter (CPU): few query rows at the end of a cache of 160 keys, several splits (more than the
key blocks too: empty splits), GQA, a window, key padding (a fully padded row), sinks, softcap, ALiBi,
non-causal rows, every statistic and the output; `plan.run` launching it for a decode step. On a GPU (opt in:
`pytest -m gpu`; benchmarks/gpu_checks.sh's decode stage) the launch at a 16K and 32K cache against the row
kernel.

Not collected by default (the name does not start with test_): tests/kernels/test_decode_split.py runs this
file in its own process with TRITON_INTERPRET=1. On a GPU it runs as is (`pytest -m "gpu or not gpu"
tests/triton_decode_interp_cases.py`).
"""

import os

import pytest
import torch

pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    pytest.skip("needs TRITON_INTERPRET=1 (set before import) or a CUDA device", allow_module_level=True)

from kernel_cases import device, hf_mask, make_inputs, make_sinks, make_slopes, make_values, reference_output
from tolerances import sum_tolerance

from entropy_lens.flags import Measure
from entropy_lens.kernels import ScoreMods, attention_with_entropy, decode_splits, run
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.kernels.triton_decode import row_stats_split
from entropy_lens.kernels.triton_entropy import row_stats_triton

DEVICE = device("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy evaluates both sides of tl.where
B, HQ, HKV, S, D = 2, 4, 2, 160, 16  # GQA 2:1; 160 keys: five of the interpreter's 32-key blocks
SCALE = torch.linspace(0.2, 0.5, HQ)


def _padding(S: int) -> torch.Tensor:
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[0, :37] = False  # left padding, not on a block edge
    keep[1, 100:105] = False  # a hole
    return keep


CASES = (
    "causal",
    "key_padding",
    "window",
    "window_padding_sinks",
    "hf_sliding_mask",
    "softcap_alibi",
    "sinks_softcap",
    "not_causal_padding",
)


def _modifiers(case: str, T: int) -> dict:
    """The keywords of ScoreMods.build of each case, on the CPU."""
    return {
        "causal": {},
        "key_padding": {"mask": _padding(S)},
        "window": {"window": 70},
        "window_padding_sinks": {"window": 45, "mask": _padding(S), "sinks": make_sinks(HQ)},
        "hf_sliding_mask": {"mask": hf_mask(_padding(S), T, S, window=100)},  # transformers' (B, 1, T, S)
        "softcap_alibi": {"softcap": 2.5, "alibi_slopes": make_slopes(HQ, 4.0)},
        "sinks_softcap": {"sinks": make_sinks(HQ), "softcap": 2.5},
        "not_causal_padding": {"causal": False, "mask": _padding(S)},
    }[case]


def _on(kw: dict, dev) -> dict:
    return {key: val.to(dev) if isinstance(val, torch.Tensor) else val for key, val in kw.items()}


def _inputs(T: int, dtype=torch.float32):
    q, k = make_inputs(B, HQ, HKV, T, S, D=D, dtype=dtype)
    return q.to(DEVICE), k.to(DEVICE), make_values(B, HKV, S, Dv=D, dtype=dtype).to(DEVICE)


def _close(got: torch.Tensor, ref: torch.Tensor, terms: int) -> bool:
    """Within two float32 evaluations of a sum of `terms` (tolerances.py), relative to max(1, |ref|)."""
    bound = sum_tolerance(terms) * ref.abs().clamp_min(1.0)
    return bool(((got.cpu() - ref.cpu()).abs() <= bound).all())


# (T, splits): one row in fewer splits than the 5 key blocks, a few rows in 7 and one in 12 (some empty)
SHAPES = ((1, 3), (3, 7), (1, 12))


@pytest.mark.parametrize(
    "case,T,splits",
    [
        pytest.param(case, T, splits, marks=() if i % len(SHAPES) == j else pytest.mark.full)
        for i, case in enumerate(CASES)
        for j, (T, splits) in enumerate(SHAPES)
    ],
)
def test_split_launch_matches_float64(case, T, splits):
    """Every statistic (their final state combined across splits) and the output, against the float64
    reference (the output of a biased case against the row kernel, which its own tests hold to float64).
    make test runs each case at one shape, the shapes in turn (each shape meets three or two cases); make
    test-full every case at every shape."""
    q, k, v = _inputs(T)
    kw = _modifiers(case, T)
    mods = ScoreMods.build(q, k, **_on(kw, DEVICE))
    scale = validate_scale(q, k, SCALE)
    measure = Measure.parse(stats="all", first_keys=5, recent_keys=40)
    cpu_mods = ScoreMods.build(q.cpu(), k.cpu(), **kw)
    ref = run("reference", q.cpu(), k.cpu(), None, scale.cpu(), cpu_mods, measure=measure)
    got = row_stats_split(q, k, v, scale, mods, splits=splits, measure=measure)
    for name in ref:
        assert _close(got[name], ref[name], S + D), name
    if mods.biased:
        expected = row_stats_triton(q, k, v, scale, mods, measure=measure).out.cpu().double()
    else:
        expected = reference_output(q.cpu(), k.cpu(), v.cpu(), SCALE, **kw)
    assert got.out.shape == (B, T, HQ, D) and got.out.dtype == q.dtype
    assert (got.out.cpu().double() - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("sinks", [False, True])
def test_fully_padded_row_and_empty_splits(sinks):
    """A sequence whose keys are all padding: every split empty (m = −inf), the combine NaN-free; entropy
    0 and output 0, and with sinks every row's mass on the sink."""
    q, k, v = _inputs(2)
    keep = _padding(S)
    keep[1] = False
    mods = ScoreMods.build(q, k, mask=keep.to(DEVICE), sinks=make_sinks(HQ).to(DEVICE) if sinks else None)
    measure = Measure.parse(stats=("entropy", "sink_mass", "max_prob", "distance"))
    got = row_stats_split(q, k, v, validate_scale(q, k, SCALE), mods, splits=5, measure=measure)
    assert all(torch.isfinite(got[name]).all() for name in got)
    assert torch.equal(got["entropy"][1].cpu(), torch.zeros(HQ, 2))
    assert torch.equal(got.out[1].cpu(), torch.zeros(2, HQ, D))
    if sinks:
        assert torch.allclose(got["sink_mass"][1].cpu(), torch.ones(HQ, 2))
    assert (got["entropy"][0] > 0).all()


def test_entropy_in_the_combine_and_the_lse():
    """The default statistics (read in the combine, no state stored) and the rows' log-sum-exp (with the
    state stored) agree with the row kernel's."""
    q, k, _ = _inputs(1)
    mods = ScoreMods.build(q, k, mask=_padding(S).to(DEVICE), sinks=make_sinks(HQ).to(DEVICE))
    scale = validate_scale(q, k, SCALE)
    measure = Measure.parse(stats=("entropy", "sink_mass"))
    for with_lse in (False, True):
        got = row_stats_split(q, k, None, scale, mods, splits=4, measure=measure, with_lse=with_lse)
        row = row_stats_triton(q, k, None, scale, mods, measure=measure, with_lse=with_lse)
        assert got.out is None and (got.lse is None) == (not with_lse)
        for name in row:
            assert (got[name] - row[name]).abs().max().item() <= 1e-6, name
        if with_lse:
            assert (got.lse - row.lse).abs().max().item() <= 1e-5


def test_run_launches_the_split_path_for_a_decode_step():
    """`run` with the "triton" kernel: one query row on 1,100 keys gets splits (decode_splits, as for a GPU of
    132 SMs), the same numbers as row_stats_split with those splits, bit for bit, and the reference's."""
    q, k = (x.to(DEVICE) for x in make_inputs(1, 4, 2, 1, 1100, D=16))
    v = make_values(1, 2, 1100, Dv=16).to(DEVICE)
    mods = ScoreMods.build(q, k)
    splits = decode_splits(q, k, mods)
    assert splits == 4  # 1,100 keys // 256 keys a split at least
    rows = attention_with_entropy(q, k, v, softmax_scale=0.3, backend="triton")
    scale = validate_scale(q, k, 0.3)
    split = row_stats_split(q, k, v, scale, mods, splits=splits, measure=Measure.parse(stats=("entropy",)))
    assert torch.equal(rows["entropy"], split["entropy"]) and torch.equal(rows.out, split.out)
    ref = run("reference", q.cpu(), k.cpu(), None, scale.cpu(), ScoreMods(), measure=Measure.parse())
    assert _close(rows["entropy"], ref["entropy"], 1100 + 16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "S_cache,T,dtype",
    [
        (16384, 1, torch.bfloat16),
        (16384, 4, torch.bfloat16),
        (32768, 1, torch.bfloat16),
        (16384, 1, torch.float32),
    ],
)
@pytest.mark.parametrize("case", ["causal", "padding_sinks", "window_softcap_alibi"])
def test_split_launch_at_a_real_cache_matches_the_row_kernel(S_cache, T, dtype, case):
    """At a TinyLlama-shaped decode step (32 query heads on 4 key heads, head dim 64) the split launch
    `run` picks gives the row kernel's statistics (every one) and output."""
    q, k = (x.cuda() for x in make_inputs(1, 32, 4, T, S_cache, D=64, dtype=dtype))
    v = make_values(1, 4, S_cache, Dv=64, dtype=dtype).cuda()
    keep = torch.ones(1, S_cache, dtype=torch.bool)
    keep[0, :1000] = False
    kw = {
        "causal": {},
        "padding_sinks": {"mask": keep.cuda(), "sinks": make_sinks(32).cuda()},
        "window_softcap_alibi": {"window": 4096, "softcap": 30.0, "alibi_slopes": make_slopes(32).cuda()},
    }[case]
    mods = ScoreMods.build(q, k, **kw)
    scale = validate_scale(q, k, 64**-0.5)
    splits = decode_splits(q, k, mods)
    assert splits > 1
    measure = Measure.parse(stats="all", first_keys=4, recent_keys=256)
    got = row_stats_split(q, k, v, scale, mods, splits=splits, measure=measure)
    row = row_stats_triton(q, k, v, scale, mods, measure=measure)
    for name in row:
        assert _close(got[name], row[name], S_cache + 64), name
    # bf16: both round the same fp32 output once; the sums' order differs by ~S·eps32 before that
    tol = 2**-7 if dtype == torch.bfloat16 else 1e-5
    assert (got.out.float() - row.out.float()).abs().max().item() <= tol
