"""Run under torchrun by tests/runs/test_context_parallel.py: `python -m torch.distributed.run --nproc-per-node P
tests/context_parallel_scans.py CASES.json` scans every case of the JSON list ({"config": ScanConfig
fields, "out": path}) with --context-parallel (all P processes per sequence, or the C of the case's own
`context_parallel`), in one launch (one process group for all of them: the scans find it initialised and
leave it be)."""

import json
import sys
from pathlib import Path

import torch.distributed as dist

from entropy_lens.runs.scan import ScanConfig, scan


def main(path: str) -> None:
    cases = json.loads(Path(path).read_text(encoding="utf-8"))
    dist.init_process_group("gloo")
    try:
        for case in cases:
            config = ScanConfig(**{"context_parallel": True, **case["config"]})
            scan(config, out=case["out"], progress=False)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
