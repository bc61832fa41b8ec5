"""The real (not interpreted) Triton kernel compiled ahead of time for A100 and H100 without a GPU: the
GPU code path builds, and no config the autotuner may pick spills registers. benchmarks/kernel_static.py
prints the same table with registers and shared memory."""

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("compiles the real kernel: run without TRITON_INTERPRET", allow_module_level=True)
pytest.importorskip("triton.backends.nvidia", reason="triton without its CUDA backend")
sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
kernel_static = pytest.importorskip("kernel_static")

from kernel_grid import cover_of

from entropy_lens.kernels.triton_decode import split_configs
from entropy_lens.kernels.triton_entropy import autotune_configs
from entropy_lens.kernels.triton_received import received_configs

# The grids below compile every variant x config under make test-full (hundreds of ptxas runs, cold: Triton's
# cache keeps them for the next run), make test an all-pairs cover of each (compile_cover): `slow`; the inner
# loop keeps one compile of the default fused kernel (test_the_fused_kernel_compiles_for_h100).
SLOW = pytest.mark.slow


@pytest.fixture(autouse=True)
def _fp_fusion(monkeypatch):
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # triton's default, stated (silences its warning)


def assert_no_spills(arch: int, dtype: str, config: tuple, **variant) -> None:
    """Compile the kernel `variant` (compile_kernel's keywords) with autotune `config` (block_m, block_n,
    warps, stages) for sm_`arch`: no spills, no stack, registers within the 255 limit."""
    bm, bn, warps, stages = config
    compiled = kernel_static.compile_kernel(
        arch, dtype, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages, **variant
    )
    use = kernel_static.resource_usage(compiled)
    assert use["spill_bytes"] == 0 and use["stack_bytes"] == 0 and 0 < use["registers"] <= 255, use


def compile_cover(points: list[tuple], dtype_at: int | None = 1) -> list[tuple]:
    """The points of a compile grid that run (tests/kernel_grid.py's `cover_of`: every one under make
    test-full): an all-pairs cover in which a config (the last value) counts with its dtype, as the
    autotuner lists them per dtype and a spill follows the pair (sm_90 put fp32's 32-key decode split on
    the stack): each dtype's every config meets every arch and every other value of its grid."""

    def features(*point):
        return (*point[:-1], (point[dtype_at], point[-1]))

    return cover_of(points, features=None if dtype_at is None else features)


def test_each_dtypes_every_config_meets_every_arch_in_each_grid():
    """The covers keep the pairs a spill follows: every (dtype, config) of a grid on every arch."""
    grids = [VARIANTS, EXTRAS_VARIANTS, ALIBI_VARIANTS, STATS_VARIANTS, STATS_OTHERS, TRAIN_VARIANTS]
    grids += [RECEIVED_VARIANTS, DECODE_GRID]
    for grid in grids:
        met = {(p[0], (p[1], p[-1])) for p in grid}
        assert met == {(arch, c) for arch in {p[0] for p in grid} for c in {(p[1], p[-1]) for p in grid}}
    assert {(p[0], p[-1]) for p in PADDED_STATS} == {(a, p[-1]) for a in (80, 90) for p in PADDED_STATS}


def variant_id(arch, dtype, fused, window, *rest) -> str:
    return "-".join(
        map(str, (arch, dtype, ("fused" if fused else "entropy") + ("+window" if window else ""), *rest))
    )


VARIANTS = compile_cover(
    [
        (arch, dtype, fused, window, config)
        for arch in (80, 90)
        for dtype in ("bf16", "fp32")
        for fused in (False, True)
        for window in (False, True)
        for config in autotune_configs(fused, dtype == "fp32", window)
    ]
)


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,fused,window,config", VARIANTS, ids=[variant_id(*v[:4], *v[4]) for v in VARIANTS]
)
def test_every_autotune_config_compiles_without_spills(arch, dtype, fused, window, config):
    r = kernel_static.row(arch, dtype, fused, config, window)
    assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert r["shared_fits"] and 0 < r["registers"] <= 255 and r["blocks_per_sm"] >= 1, r


@SLOW
@pytest.mark.parametrize(
    "dtype,fused,causal,padding,head_dim",
    [
        ("fp16", True, True, True, 64),
        ("bf16", False, False, True, 128),
        ("bf16", True, False, False, 80),
    ],
)
def test_other_variants_compile_for_a100(dtype, fused, causal, padding, head_dim):
    compiled = kernel_static.compile_kernel(
        80, dtype, with_output=fused, causal=causal, key_padding=padding, head_dim=head_dim
    )
    assert compiled.asm["cubin"] and kernel_static.resource_usage(compiled)["registers"] > 0


EXTRAS_VARIANTS = compile_cover(
    [
        (arch, dtype, fused, window, config)
        for arch in (80, 90)
        for dtype in ("bf16", "fp32")
        for fused in (False, True)
        for window in (False, True)
        for config in autotune_configs(fused, dtype == "fp32", window, softcap=True)
    ]
)


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,fused,window,config",
    EXTRAS_VARIANTS,
    ids=[variant_id(*v[:4], *v[4]) for v in EXTRAS_VARIANTS],
)
def test_softcap_and_sinks_compile_without_spills(arch, dtype, fused, window, config):
    """Gemma2's softcap (the exp2 tanh) and gpt-oss's sinks together, on every config the autotuner may
    pick for that variant."""
    assert_no_spills(arch, dtype, config, with_output=fused, window=window, softcap=True, sinks=True)


# ALiBi alone (BLOOM, MPT, Falcon), with sinks, and with the softcap and sinks: every config the
# autotuner may pick for the variant (triton_entropy.ALIBI_WINDOW_DROPS names those dropped)
ALIBI_EXTRAS = {"alibi": (False, False), "alibi+sinks": (False, True), "alibi+softcap+sinks": (True, True)}
ALIBI_VARIANTS = compile_cover(
    [
        (arch, dtype, fused, window, extras, config)
        for arch in (80, 90)
        for dtype in ("bf16", "fp32")
        for fused in (False, True)
        for window in (False, True)
        for extras, (softcap, _) in ALIBI_EXTRAS.items()
        for config in autotune_configs(fused, dtype == "fp32", window, softcap=softcap, alibi=True)
    ]
)


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,fused,window,extras,config",
    ALIBI_VARIANTS,
    ids=[variant_id(*v[:5], *v[5]) for v in ALIBI_VARIANTS],
)
def test_alibi_compiles_without_spills(arch, dtype, fused, window, extras, config):
    softcap, sinks = ALIBI_EXTRAS[extras]
    assert_no_spills(
        arch, dtype, config, with_output=fused, window=window, softcap=softcap, sinks=sinks, alibi=True
    )


@SLOW
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("config", autotune_configs(True, False, alibi=True))
def test_non_causal_alibi_compiles_without_spills(arch, config):
    """Non-causal ALiBi takes |i + S − T − j| (flash-attn's form): the fused bf16 variant, the fullest."""
    assert_no_spills(arch, "bf16", config, with_output=True, causal=False, alibi=True)


# Every row statistic: the final state stored with all the extra accumulators of stats.EXTRA_STATE
# (kernel_static.ALL_EXTRAS; lk is kept with sinks only, as the launcher keeps it), with the score modifiers
# the models combine, on every config the autotuner may pick for that variant (triton_entropy.STATS_DROPS
# names those dropped): (softcap, sinks, alibi)
STATS_EXTRAS = {
    "plain": (False, False, False),
    "sinks": (False, True, False),
    "softcap+sinks": (True, True, False),
    "alibi": (False, False, True),
    "alibi+sinks": (False, True, True),
    "alibi+softcap+sinks": (True, True, True),
}
STATS_VARIANTS = compile_cover(
    [
        (arch, dtype, fused, window, extras, config)
        for arch in (80, 90)
        for dtype in ("bf16", "fp32")
        for fused in (False, True)
        for window in (False, True)
        for extras, (softcap, _, alibi) in STATS_EXTRAS.items()
        for config in autotune_configs(
            fused, dtype == "fp32", window, softcap=softcap, alibi=alibi, stats=True
        )
    ]
)


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,fused,window,extras,config",
    STATS_VARIANTS,
    ids=[variant_id(*v[:5], *v[5]) for v in STATS_VARIANTS],
)
def test_every_statistic_compiles_without_spills(arch, dtype, fused, window, extras, config):
    softcap, sinks, alibi = STATS_EXTRAS[extras]
    assert_no_spills(
        arch,
        dtype,
        config,
        with_output=fused,
        window=window,
        softcap=softcap,
        sinks=sinks,
        alibi=alibi,
        extras=kernel_static.ALL_EXTRAS,
    )


# the same without the causal mask (every block masked by the sequence end only; ALiBi's |·|), in fp16,
# and the state alone (max_prob: no extra accumulator), each on every config of its variant
STATS_OTHERS = compile_cover(
    [
        (arch, dtype, fused, name, config)
        for arch in (80, 90)
        for dtype, names in (
            ("bf16", ("non-causal", "non-causal+alibi+sinks", "state", "state+sinks")),
            ("fp16", ("all", "alibi+softcap+sinks")),
            ("fp32", ("non-causal", "state")),
        )
        for fused in (False, True)
        for name in names
        for config in autotune_configs(
            fused, dtype == "fp32", alibi="alibi" in name, softcap="softcap" in name, stats=True
        )
    ]
)


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,fused,name,config",
    STATS_OTHERS,
    ids=[variant_id(*v[:3], False, v[3], *v[4]) for v in STATS_OTHERS],
)
def test_every_statistic_other_variants_compile_without_spills(arch, dtype, fused, name, config):
    assert_no_spills(
        arch,
        dtype,
        config,
        with_output=fused,
        causal="non-causal" not in name,
        softcap="softcap" in name,
        sinks="sinks" in name,
        alibi="alibi" in name,
        extras=() if name.startswith("state") else kernel_static.ALL_EXTRAS,
    )


# every statistic under key padding: first_mass sums the keys the padding marks as a row's first K real ones
PADDED_STATS = compile_cover(
    [
        (arch, fused, config)
        for arch in (80, 90)
        for fused in (False, True)
        for config in autotune_configs(fused, False, stats=True)
    ],
    dtype_at=None,
)


@SLOW
@pytest.mark.parametrize(
    "arch,fused,config",
    PADDED_STATS,
    ids=[variant_id(a, "bf16", f, False, "padding", *c) for a, f, c in PADDED_STATS],
)
def test_every_statistic_under_key_padding_compiles_without_spills(arch, fused, config):
    assert_no_spills(
        arch, "bf16", config, with_output=fused, key_padding=True, extras=kernel_static.ALL_EXTRAS
    )


# the CUDA training route's forward (kernels/train.py, `stream_triton`): the fused variant storing its state
# (m, l, u: the log-sum-exp of flash's backward) without extra accumulators (entropy, max_logit: no sink),
# in the dtypes flash's CUDA backward takes, causal with and without a window, no key padding, at the head
# sizes of most models, on every config the autotuner may pick for it. At head size 128 its one config,
# (64, 32, 4, 3), sits at 255 registers with 8 B of stack and no spill (sm_80 and sm_90; (64, 32, 8, 3)
# would take none): held to that, so a change that spills fails here
TRAIN_STACK_BYTES = {64: 0, 128: 8}
TRAIN_VARIANTS = compile_cover(
    [
        (arch, dtype, window, head_dim, config)
        for arch in (80, 90)
        for dtype in ("bf16", "fp16")
        for window in (False, True)
        for head_dim in (64, 128)
        for config in autotune_configs(True, False, window, stats=True)
    ]
)


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,window,head_dim,config",
    TRAIN_VARIANTS,
    ids=[
        f"{variant_id(a, d, True, w, 'state', h)}-{'-'.join(map(str, c))}" for a, d, w, h, c in TRAIN_VARIANTS
    ],
)
def test_the_training_forward_compiles_without_spills(arch, dtype, window, head_dim, config):
    bm, bn, warps, stages = config
    compiled = kernel_static.compile_kernel(
        arch,
        dtype,
        with_output=True,
        window=window,
        head_dim=head_dim,
        extras=(),
        block_m=bm,
        block_n=bn,
        num_warps=warps,
        num_stages=stages,
    )
    use = kernel_static.resource_usage(compiled)
    assert use["spill_bytes"] == 0 and use["stack_bytes"] <= TRAIN_STACK_BYTES[head_dim], use
    assert 0 < use["registers"] <= 255, use


def test_the_fused_kernel_compiles_for_h100():
    """One compile of the default fused kernel (bf16, sm_90, its first autotune config) in the inner loop:
    the GPU code path builds without a GPU; the grids above (slow) cover every variant and config."""
    config = autotune_configs(True, False, False)[0]
    assert_no_spills(90, "bf16", config, with_output=True)


# the column pass of attention received (kernels/triton_received.py): every config the autotuner may pick,
# in each dtype, causal with and without a window, non-causal, with key padding, the softcap and ALiBi
RECEIVED_EXTRAS = {
    "causal": {},
    "causal+window+padding": {"window": True, "key_padding": True},
    "non-causal+padding": {"causal": False, "key_padding": True},
    "softcap+alibi": {"softcap": True, "alibi": True},
    "window+softcap+alibi+padding": {"window": True, "softcap": True, "alibi": True, "key_padding": True},
}
RECEIVED_VARIANTS = compile_cover(
    [
        (arch, dtype, extras, config)
        for arch in (80, 90)
        for dtype in ("bf16", "fp16", "fp32")
        for extras in RECEIVED_EXTRAS
        for config in received_configs(dtype == "fp32")
    ]
)


def assert_received_compiles(arch, dtype, config, head_dim=64, **variant):
    bm, bn, warps, stages = config
    compiled = kernel_static.compile_received_kernel(
        arch, dtype, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages, head_dim=head_dim, **variant
    )
    use = kernel_static.resource_usage(compiled)
    assert use["spill_bytes"] == 0 and use["stack_bytes"] == 0 and 0 < use["registers"] <= 255, use


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,extras,config",
    RECEIVED_VARIANTS,
    ids=[f"{a}-{d}-{e}-{'-'.join(map(str, c))}" for a, d, e, c in RECEIVED_VARIANTS],
)
def test_the_received_kernel_compiles_without_spills(arch, dtype, extras, config):
    assert_received_compiles(arch, dtype, config, **RECEIVED_EXTRAS[extras])


@SLOW
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("config", received_configs(False))
def test_the_received_kernel_compiles_at_head_size_128(arch, config):
    assert_received_compiles(arch, "bf16", config, head_dim=128, window=True, softcap=True, alibi=True)


def test_the_received_kernel_compiles_for_h100():
    """One compile of the column pass (bf16, sm_90, its first config, key padding) in the inner loop."""
    assert_received_compiles(90, "bf16", received_configs(False)[0], key_padding=True)


# the decode step's split and combine kernels (kernels/triton_decode.py): every config the split kernel's
# autotuner may pick, the default statistics and every one with every modifier
DECODE_VARIANTS = {
    "default": {},
    "all": {
        "window": True,
        "softcap": True,
        "sinks": True,
        "alibi": True,
        "extras": kernel_static.ALL_EXTRAS,
    },
    "all_padding": {"key_padding": True, "sinks": True, "extras": kernel_static.ALL_EXTRAS},
}


def assert_decode_compiles(arch, dtype, config, head_dim=64, **variant):
    bn, warps, stages = config
    for compiled in kernel_static.compile_decode_kernels(
        arch, dtype, block_n=bn, num_warps=warps, num_stages=stages, head_dim=head_dim, **variant
    ):
        use = kernel_static.resource_usage(compiled)
        assert use["spill_bytes"] == 0 and use["stack_bytes"] == 0 and 0 < use["registers"] <= 255, use


DECODE_GRID = compile_cover(
    [
        (arch, dtype, variant, config)
        for arch in (80, 90)
        for dtype in ("bf16", "fp32")
        for variant in DECODE_VARIANTS
        for config in split_configs(dtype == "fp32")
    ]
)


@SLOW
@pytest.mark.parametrize(
    "arch,dtype,variant,config", DECODE_GRID, ids=["-".join(map(str, (*v[:3], *v[3]))) for v in DECODE_GRID]
)
def test_the_decode_kernels_compile_without_spills(arch, dtype, variant, config):
    assert_decode_compiles(arch, dtype, config, **DECODE_VARIANTS[variant])


@SLOW
@pytest.mark.parametrize("config", split_configs(False))
def test_the_decode_kernels_compile_at_head_size_128(config):
    assert_decode_compiles(90, "bf16", config, head_dim=128, **DECODE_VARIANTS["all"])


def test_the_decode_kernels_compile_for_h100():
    """The inner loop's one compile of the decode step's kernels (the default fused variant)."""
    assert_decode_compiles(90, "bf16", split_configs(False)[0])
