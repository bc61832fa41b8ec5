"""The check every kernel meets (tests/kernels/test_plan.py): each statistic entropy_lens.statistics declares,
from `kernels`, equal to the reference's float64 definition. A module of its own so that a process
started under TRITON_INTERPRET=1 (the interpreter must be set before triton is imported) runs it too:
`python tests/every_statistic.py triton`."""

import sys

import torch

from entropy_lens.flags import Measure, Stats
from entropy_lens.kernels import ScoreMods, run
from entropy_lens.kernels.contract import validate_scale
from entropy_lens.statistics import STATISTICS


def every_statistic(kernels) -> list[str]:
    """The kernels checked: each returns every declared statistic, separate and with the output (GQA,
    sinks), within 1e-5 of the reference; AssertionError naming the kernel and statistic otherwise."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 6, 8, generator=g) for h in (4, 2, 2))
    mods = ScoreMods.build(q, k, sinks=torch.tensor([0.5, -1.0, 2.0, 0.0]))
    scale, stats = validate_scale(q, k, 0.4), tuple(STATISTICS)
    measure = Measure(stats=Stats(stats))
    want = run("reference", q, k, None, scale, mods, measure=measure)
    assert list(want) == list(stats)
    for kernel in kernels:
        for values in (None, v):
            got = run(kernel, q, k, values, scale, mods, measure=measure)
            assert list(got) == list(stats) and (got.out is None) == (values is None), kernel
            for name in stats:
                assert (got[name] - want[name]).abs().max().item() <= 1e-5, (kernel, name)
    return list(kernels)


if __name__ == "__main__":
    print(every_statistic(sys.argv[1:]))
