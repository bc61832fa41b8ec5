"""Static check of the Triton entropy kernel, no GPU needed: compile every config the autotuner may pick,
for each variant, ahead of time for sm_80 (A100) and sm_90 (H100) and read the cubin's resource usage.

    python benchmarks/kernel_static.py [--arch 80 90] [--out benchmarks/results/kernel_static.json]

For each (arch, dtype, entropy-only | fused, with a window or not, the default statistics or every one
(+stats: all the extra accumulators, with sinks), BLOCK_M, BLOCK_N, warps, stages): registers per thread,
spills (local memory and stack frame, bytes; above 0 is slow), shared memory per block and whether it
fits the architecture, and the blocks per SM that registers and shared memory allow. It proves the GPU
compile path works and flags configs that cannot be fast; it measures no time (benchmarks/scan_gpu.py
does, on a GPU). Compilation uses the ptxas and cuobjdump bundled with triton.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package: _bench.py is beside
from _bench import Column, parser, table, write_record

# per-SM limits: registers, shared memory per block (opt-in maximum), shared memory per SM
LIMITS = {
    80: {"regs": 65536, "smem_block": 163 * 1024, "smem_sm": 164 * 1024},
    90: {"regs": 65536, "smem_block": 227 * 1024, "smem_sm": 228 * 1024},
}
DTYPES = ("bf16", "fp16", "fp32")  # fp16 compiles like bf16; fp32 uses IEEE FMA products (no tensor cores)
# stats.EXTRA_STATE: the accumulators of every row statistic
ALL_EXTRAS = ("w", "c", "lk", "d", "f", "mk", "rk")


def compile_for(fn, const: dict, pointers: dict, arch: int, options: dict):
    """`fn` compiled for sm_`arch` without a GPU: the arguments in `const` as constexprs, those (and the
    fields of its tuple arguments, triton_steps.Inputs, Outputs and triton_split.Parts) in `pointers` as
    pointers to their dtype, the other pointer fields as fp32 pointers, SOFTCAP as fp32 and every other
    scalar as i32."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from entropy_lens.kernels.triton_split import Parts
    from entropy_lens.kernels.triton_steps import Inputs, Outputs

    def kind(name, annotation=int):
        if name in pointers or annotation is torch.Tensor:
            return "*" + pointers.get(name, "fp32")
        return "fp32" if name == "SOFTCAP" else "i32"

    tuples = {"I": Inputs, "O": Outputs, "P": Parts}  # the kernels' tuple arguments, by name
    signature = {
        name: "constexpr"
        if name in const
        else tuples[name](*(kind(f, a) for f, a in typing.get_type_hints(tuples[name]).items()))
        if name in tuples
        else kind(name)
        for name in fn.arg_names
    }
    constexprs = {(fn.arg_names.index(name),): value for name, value in const.items()}
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def variant_bits(dtype: str, **flags) -> int:
    """The kernels' VARIANT (triton_steps.pack) for tiles of `dtype` with `flags` (VARIANT_FLAGS' names)."""
    from entropy_lens.kernels.triton_steps import VARIANT_FLAGS, pack

    return pack(VARIANT_FLAGS, {"CAST_F32": dtype == "fp32", "IEEE": dtype == "fp32", **flags})


def switches(dtype, causal, window, key_padding, with_output, softcap, alibi, sinks, extras) -> dict:
    """The kernels' two compile-time switches, VARIANT and EXTRAS, for one variant (as its launcher packs
    them): the tiles' `dtype`, the flags, and `extras` (None: no state stored)."""
    variant = {"CAUSAL": causal, "HAS_WINDOW": window, "HAS_KEEP": key_padding, "WITH_OUTPUT": with_output}
    variant |= {
        "HAS_SOFTCAP": softcap,
        "HAS_ALIBI": alibi,
        "HAS_SINKS": sinks,
        "STORE_STATE": extras is not None,
    }
    return {"VARIANT": variant_bits(dtype, **variant), "EXTRAS": extras_bits(extras, sinks)}


def extras_bits(extras: tuple[str, ...] | None, sinks: bool) -> int:
    """The kernels' EXTRAS (triton_steps.pack) for `extras` as the launcher keeps them: lk and mk with
    sinks only."""
    from entropy_lens.kernels.stats import EXTRA_STATE
    from entropy_lens.kernels.triton_steps import pack

    return pack(EXTRA_STATE, [name for name in extras or () if name not in ("lk", "mk") or sinks])


def compile_kernel(
    arch: int,
    dtype: str,
    *,
    with_output: bool,
    causal: bool = True,
    window: bool = False,
    key_padding: bool = False,
    block_m: int = 64,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
    head_dim: int = 64,
    group: int = 8,
    softcap: bool = False,
    sinks: bool = False,
    alibi: bool = False,
    extras: tuple[str, ...] | None = None,
):
    """The kernel compiled for `arch` (80, 90, ...) without a GPU: a triton CompiledKernel with .asm;
    `extras` None: entropy and sink mass read in the kernel (the default statistics), else the final state
    stored with these accumulators of stats.EXTRA_STATE (ALL_EXTRAS: every statistic; "lk" and "mk" are
    kept only with sinks, as the launcher keeps them)."""
    from entropy_lens.kernels.triton_entropy import ENTROPY_KERNEL as fn

    pointers = {"Q": dtype, "K": dtype, "V": dtype, "KEEP": "i8", "O": dtype}
    flags = (causal, window, key_padding, with_output, softcap, alibi, sinks)
    const = {
        "GROUP": group,
        "D": head_dim,
        **switches(dtype, *flags, extras),
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
    }
    return compile_for(fn, const, pointers, arch, {"num_warps": num_warps, "num_stages": num_stages})


def compile_received_kernel(
    arch: int,
    dtype: str,
    *,
    causal: bool = True,
    window: bool = False,
    key_padding: bool = False,
    softcap: bool = False,
    alibi: bool = False,
    block_m: int = 64,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
    head_dim: int = 64,
    group: int = 8,
):
    """The column pass of attention received (kernels/triton_received.py) compiled for `arch` without a GPU."""
    from entropy_lens.kernels.triton_received import RECEIVED_KERNEL as fn

    variant = {"CAUSAL": causal, "HAS_WINDOW": window, "HAS_KEEP": key_padding}
    variant |= {"HAS_SOFTCAP": softcap, "HAS_ALIBI": alibi}
    const = {
        "GROUP": group,
        "D": head_dim,
        "VARIANT": variant_bits(dtype, **variant),
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
    }
    pointers = {"Q": dtype, "K": dtype, "KEEP": "i8", "LSE": "fp32"}
    return compile_for(fn, const, pointers, arch, {"num_warps": num_warps, "num_stages": num_stages})


def compile_decode_kernels(
    arch: int,
    dtype: str,
    *,
    with_output: bool = True,
    causal: bool = True,
    window: bool = False,
    key_padding: bool = False,
    softcap: bool = False,
    sinks: bool = False,
    alibi: bool = False,
    extras: tuple[str, ...] | None = None,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
    head_dim: int = 64,
    group: int = 8,
):
    """The decode step's split and combine kernels (kernels/triton_split.py, triton_combine.py) compiled
    for `arch` without a GPU: (split, combine), triton CompiledKernels; `extras` as compile_kernel's."""
    from entropy_lens.kernels.splits import DECODE_ROWS
    from entropy_lens.kernels.triton_combine import combine_kernel
    from entropy_lens.kernels.triton_split import split_kernel

    flags = (causal, window, key_padding, with_output, softcap, alibi, sinks)
    ending = {"D": head_dim, **switches(dtype, *flags, extras)}
    split_const = {"GROUP": group, **ending, "BLOCK_M": DECODE_ROWS, "BLOCK_N": block_n}
    pointers = {"Q": dtype, "K": dtype, "V": dtype, "KEEP": "i8", "O": dtype}
    split_options = {"num_warps": num_warps, "num_stages": num_stages}
    return (
        compile_for(split_kernel, split_const, pointers, arch, split_options),
        compile_for(combine_kernel, {**ending, "BLOCK_M": DECODE_ROWS}, pointers, arch, {"num_warps": 4}),
    )


def resource_usage(compiled) -> dict:
    """Registers per thread, local (spill) and stack bytes, from the cubin via triton's cuobjdump."""
    import triton

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        Path(path).write_bytes(compiled.asm["cubin"])
        text = subprocess.run(
            [str(cuobjdump), "--dump-resource-usage", path], capture_output=True, text=True, check=True
        ).stdout
    found = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", text))
    return {
        "registers": int(found["REG"]),
        "stack_bytes": int(found["STACK"]),
        "spill_bytes": int(found["LOCAL"]),
        "shared_bytes": int(compiled.metadata.shared),
    }


def row(
    arch: int,
    dtype: str,
    with_output: bool,
    config: tuple[int, int, int, int],
    window: bool = False,
    all_stats: bool = False,
) -> dict:
    """One config's resources; `all_stats`: the variant that computes every row statistic (all extra
    accumulators on, and sinks, so the key sum lk is kept as well)."""
    bm, bn, warps, stages = config
    t0 = time.perf_counter()
    compiled = compile_kernel(
        arch,
        dtype,
        with_output=with_output,
        window=window,
        sinks=all_stats,
        extras=ALL_EXTRAS if all_stats else None,
        block_m=bm,
        block_n=bn,
        num_warps=warps,
        num_stages=stages,
    )
    use = resource_usage(compiled)
    lim = LIMITS.get(arch, LIMITS[90])
    threads = 32 * warps
    by_regs = lim["regs"] // (max(use["registers"], 1) * threads)
    fits = use["shared_bytes"] <= lim["smem_block"]
    by_smem = lim["smem_sm"] // max(use["shared_bytes"], 1) if fits else 0
    return {
        "arch": f"sm_{arch}",
        "dtype": dtype,
        "kernel": ("fused" if with_output else "entropy")
        + ("+window" if window else "")
        + ("+stats" if all_stats else ""),
        "block_m": bm,
        "block_n": bn,
        "num_warps": warps,
        "num_stages": stages,
        **use,
        "shared_fits": fits,
        "blocks_per_sm": min(by_regs, by_smem),
        "compile_s": time.perf_counter() - t0,
    }


def main() -> int:
    ap = parser(__doc__, "kernel_static")
    ap.add_argument("--arch", type=int, nargs="+", default=[80, 90])
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"], choices=DTYPES)
    args = ap.parse_args()
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: this compiles the real kernel", file=sys.stderr)
        return 2
    import triton

    from entropy_lens.kernels.triton_entropy import autotune_configs

    rows = [
        row(arch, dtype, wo, cfg, window, all_stats)
        for arch in args.arch
        for dtype in args.dtypes
        for wo in (False, True)
        for window in (False, True)
        for all_stats in (False, True)
        for cfg in autotune_configs(wo, dtype == "fp32", window, stats=all_stats)
    ]
    columns = [Column(h, k) for h, k in (("arch", "arch"), ("dtype", "dtype"), ("kernel", "kernel"))]
    columns += [Column(h, k) for h, k in (("BM", "block_m"), ("BN", "block_n"), ("warps", "num_warps"))]
    columns += [Column(h, k) for h, k in (("stages", "num_stages"), ("regs", "registers"))]
    columns += [Column("spill B", "spill_bytes"), Column("stack B", "stack_bytes")]
    columns += [Column("smem KiB", lambda r: r["shared_bytes"] / 1024, ".1f")]
    columns += [Column("fits", lambda r: "yes" if r["shared_fits"] else "NO")]
    columns += [Column("blk/SM", "blocks_per_sm")]
    print(table(rows, columns))
    fixed = {"head_dim": 64, "gqa_group": 8, "causal": True}
    write_record(args.out, "kernel_static", triton=triton.__version__, **fixed, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
