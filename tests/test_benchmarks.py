"""The GPU benchmark's pieces that run without a GPU: its model shape, FLOP count and CPU refusal."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))
scan_gpu = pytest.importorskip("scan_gpu")


def test_tinyllama_shape_and_a_small_forward():
    full = scan_gpu.tinyllama_config()
    assert (full.num_hidden_layers, full.num_attention_heads, full.num_key_value_heads, full.head_dim) == (22, 32, 4, 64)
    small = scan_gpu.tinyllama_config(num_hidden_layers=1, hidden_size=64, intermediate_size=96, vocab_size=50,
                                      num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    model = scan_gpu.build_model(small, "cpu", torch.float32)
    logits = model(torch.randint(0, 50, (1, 12))).logits
    assert logits.shape == (1, 12, 50) and torch.isfinite(logits).all()


def test_flop_count():
    assert scan_gpu.entropy_flops(2, 4, 8, causal=False) == 2 * 2 * 16 * 8
    assert scan_gpu.entropy_flops(2, 4, 8) == 2 * 2 * 10 * 8  # 4·5/2 visible (query, key) pairs


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on machines without CUDA")
def test_refuses_without_cuda():
    run = subprocess.run([sys.executable, str(BENCH / "scan_gpu.py"), "--lengths", "16"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert run.returncode == 1 and "needs a CUDA GPU" in run.stderr
