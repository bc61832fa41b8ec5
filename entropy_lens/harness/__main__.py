"""`python -m entropy_lens.harness ARGS`: lm-eval's own command line (`lm_eval ARGS`, unchanged) with the
"entropy-lens" model registered.

    python -m entropy_lens.harness --model entropy-lens --model_args pretrained=tiny-nope,scale=1.2 \\
        --device cpu --tasks entropy_lens_passkey_128 --include_path "$(python -c 'import entropy_lens.harness as h; print(h.TASKS_DIR)')"

lm-eval 0.4 finds models only in its own registry and reads no plugin entry points, so its `lm_eval`
command cannot see a model another package defines (lm-evaluation-harness issues #1457, #3282): this is
that command, after importing the module that registers this one. A Python caller registers it the same
way: `import entropy_lens.harness.model`, then lm_eval.simple_evaluate(model="entropy-lens", ...).

An input the toolkit refuses (a --model_args value, a passkey task's metadata) is one line on stderr and
exit status 2, as in `entropy-lens`, never a traceback.
"""

import sys

from entropy_lens.harness.config import require_lm_eval


def main() -> int:
    from entropy_lens.errors import EntropyLensError

    try:
        require_lm_eval()
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    from lm_eval.__main__ import cli_evaluate

    import entropy_lens.harness.model  # noqa: F401  registers "entropy-lens"

    sys.argv[0] = "lm_eval"
    try:
        cli_evaluate()
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
