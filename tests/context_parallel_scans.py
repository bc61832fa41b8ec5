"""Run under torchrun by tests/runs/test_context_parallel.py: `python -m torch.distributed.run --nproc-per-node P
tests/context_parallel_scans.py CASES.json` runs every case of the JSON list in one launch (one process
group for all of them: the scans and commands find it initialised and leave it be), in order:

    {"config": ScanConfig fields, "out": path}   a scan with --context-parallel (all P processes per
                                                 sequence, or the C of the case's own `context_parallel`;
                                                 `context_parallel: false` for a data-parallel scan)
    {"argv": [...]}                              a command through entropy_lens.cli.main, as
                                                 `torchrun -m entropy_lens ARGV` runs it (rank 0 writes
                                                 and reports); a command that fails ends the launch

One launch of torch's start-up and the models' loading serves many cases: the torchrun tests' cost is
mostly that start-up, paid once per launch rather than once per case."""

import json
import sys
from pathlib import Path

import torch.distributed as dist

from entropy_lens.cli import main as cli
from entropy_lens.runs.scan import ScanConfig, scan


def main(path: str) -> None:
    cases = json.loads(Path(path).read_text(encoding="utf-8"))
    dist.init_process_group("gloo")
    try:
        for case in cases:
            if "argv" in case:
                code = cli(case["argv"])
                if code != 0:
                    raise SystemExit(f"{' '.join(case['argv'])} exited {code}")
                continue
            config = ScanConfig(**{"context_parallel": True, **case["config"]})
            scan(config, out=case["out"], progress=False)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
