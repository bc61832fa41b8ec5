"""`entropy-lens eval` (lm-evaluation-harness over a checkpoint and its variant) and `entropy-lens
eval-table` (the paper's Tables 1 and 3 from its results files)."""

from __future__ import annotations

import argparse

from entropy_lens.cli.options import add_settings, config_from_args
from entropy_lens.cli.scan import BUNDLED
from entropy_lens.harness.config import INSTALL, EvalConfig
from entropy_lens.runs.output import OutputSettings

EVAL_DESCRIPTION = f"""\
Runs lm-evaluation-harness's evaluator on the checkpoint as `scan` loads it and with the variant `scan`
applies (--nope, --scale, --head-scales, --scale-schedule, --rope-scaling, --train-len): lm-eval's own
Hugging Face model and request handling, every forward through the toolkit's attention function. Writes
lm-eval's results JSON with the toolkit's provenance under "entropy_lens". The passkey task of
`entropy-lens passkey` ships as lm-eval tasks, entropy_lens_passkey_<W> (W = 64, 128, ..., 131072).
Needs lm-eval: {INSTALL}.
"""
EVAL_EXAMPLES = """examples:
  entropy-lens eval tiny-nope --tasks entropy_lens_passkey_128,entropy_lens_passkey_256 --max-length 256 --out p.json
  entropy-lens eval tiny-nope --scale 1.2 --tasks my_task --include-path tasks/ --limit 50 --out s12.json
  entropy-lens eval AntNLP/TinyLlama-NoPE-1.1B --nope --device cuda --batch-size 16 \\
      --tasks arc_challenge,arc_easy,boolq,hellaswag,openbookqa,piqa,winogrande --out table1-nope.json
  entropy-lens eval path/to/TinyLlama-NoPE-HeadScale8k --max-length 8192 --device cuda \\
      --tasks longbench_narrativeqa,longbench_qasper --gen-kwargs num_beams=5 --out lb-hs8k.json
"""
TABLE_EXAMPLES = """examples:
  entropy-lens eval-table 1 table1-rope.json table1-nope.json --labels RoPE NoPE
  entropy-lens eval-table 3 lb-*.json --out table3.md
"""


def add_parsers(sub) -> None:
    e = sub.add_parser(
        "eval",
        help="lm-evaluation-harness tasks on a checkpoint and its variant (results JSON)",
        description=EVAL_DESCRIPTION + "\n" + BUNDLED,
        epilog=EVAL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(e, EvalConfig, exclusive=[("scale", "head_scales")])
    add_settings(
        e,
        OutputSettings,
        ("out", "force", "quiet"),
        required=("out",),
        helps={
            "out": "the results JSON (lm-eval's, with the toolkit's provenance)",
            "force": "overwrite an existing --out (and its .samples.json with --log-samples)",
            "quiet": "no progress bars and no lm-eval log below errors",
        },
    )
    e.set_defaults(func=cmd_eval)

    t = sub.add_parser(
        "eval-table",
        help="the paper's Table 1 (commonsense) or Table 3 (LongBench) from lm-eval results files",
        epilog=TABLE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "table",
        choices=("1", "3"),
        help="1: arc_challenge, arc_easy, boolq, hellaswag, openbookqa, piqa, winogrande (acc_norm; acc for "
        "boolq and winogrande) and their average; 3: LongBench's 16 English sub-tasks in the paper's groups",
    )
    t.add_argument("results", nargs="+", metavar="RESULTS", help="results JSON files, one per row")
    t.add_argument("--labels", nargs="+", metavar="NAME", help="the rows' names (default: model and variant)")
    add_settings(t, OutputSettings, ("out",), helps={"out": "write the table here: .md (Markdown) or .csv"})
    t.set_defaults(func=cmd_eval_table)


def cmd_eval(args) -> int:
    from entropy_lens.harness.evaluate import evaluate

    config = config_from_args(EvalConfig, args)
    results = evaluate(config, out=args.out, force=args.force, progress=not args.quiet)
    for task, values in results["results"].items():
        shown = ", ".join(
            f"{key.split(',')[0]} {value:.4g}"
            for key, value in values.items()
            if "," in key and "_stderr" not in key and isinstance(value, (int, float))
        )
        print(f"{task}: {shown}")
    print(f"wrote {args.out}")
    return 0


def cmd_eval_table(args) -> int:
    from entropy_lens.analysis.downstream import (
        commonsense_table,
        load_harness_run,
        longbench_table,
        table_csv,
        table_markdown,
    )
    from entropy_lens.errors import EntropyLensError

    labels = args.labels or [None] * len(args.results)
    if len(labels) != len(args.results):
        raise EntropyLensError(
            f"--labels names {len(labels)} rows for {len(args.results)} results files; give one name per file"
        )
    runs = [load_harness_run(path, label=label) for path, label in zip(args.results, labels)]
    table = (commonsense_table if args.table == "1" else longbench_table)(runs)
    text = table_markdown(table)
    if args.out is None:
        print(text)
        return 0
    from pathlib import Path

    from entropy_lens.results import atomic_write_text

    out = Path(args.out)
    if out.suffix.lower() not in (".md", ".csv"):
        raise EntropyLensError(f"--out {out}: write .md (Markdown) or .csv; e.g. --out table{args.table}.md")
    atomic_write_text(out, text + "\n" if out.suffix.lower() == ".md" else table_csv(table))
    print(f"wrote {out}")
    return 0
