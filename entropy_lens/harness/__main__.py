"""`python -m entropy_lens.harness ARGS`: lm-eval's own command line (`lm_eval ARGS`, unchanged) with the
"entropy-lens" model registered.

    python -m entropy_lens.harness --model entropy-lens --model_args pretrained=tiny-nope,scale=1.2 \\
        --tasks entropy_lens_passkey_128 --include_path "$(python -c 'import entropy_lens.harness as h; print(h.TASKS_DIR)')"

The device follows the machine, as every `entropy-lens` command's `--device auto`: the GPU where torch
sees one, else the CPU. lm-eval's own default is `cuda:0`, which fails on a machine without a GPU, so a
run that gives no `--device` (and no `--config` file, whose `device` lm-eval reads) is given
`--device auto` (`with_device`); `--device cpu`, `cuda:1`, ... choose as in lm-eval.

lm-eval 0.4 finds models only in its own registry and reads no plugin entry points, so its `lm_eval`
command cannot see a model another package defines (lm-evaluation-harness issues #1457, #3282): this is
that command, after importing the module that registers this one. A Python caller registers it the same
way: `import entropy_lens.harness.model`, then lm_eval.simple_evaluate(model="entropy-lens", ...).

An input the toolkit refuses (a --model_args value, a passkey task's metadata) is one line on stderr and
exit status 2, as in `entropy-lens`, never a traceback.
"""

import sys

from entropy_lens.harness.config import require_lm_eval

DEFAULT_DEVICE = "auto"  # the toolkit's: the GPU where torch sees one, else the CPU (not lm-eval's cuda:0)


def with_device(argv: list[str]) -> list[str]:
    """lm-eval's arguments with `--device auto` added to a run that chooses no device.

    Args:
        argv: the arguments after the program's name, as lm-eval reads them.

    Returns:
        list[str]: `argv`, with `--device auto` at the end where it names a `--model` and neither a
            `--device` nor a `--config` file (lm-eval's default, cuda:0, fails without a GPU).
    """

    def given(*flags: str) -> bool:
        return any(arg in flags or arg.startswith(tuple(f"{f}=" for f in flags)) for arg in argv)

    if given("--model") and not given("--device", "--config", "-C"):
        return [*argv, "--device", DEFAULT_DEVICE]
    return list(argv)


def main() -> int:
    from entropy_lens.errors import EntropyLensError

    try:
        require_lm_eval()
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    from lm_eval.__main__ import cli_evaluate

    import entropy_lens.harness.model  # noqa: F401  registers "entropy-lens"

    sys.argv[:] = ["lm_eval", *with_device(sys.argv[1:])]
    try:
        cli_evaluate()
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
