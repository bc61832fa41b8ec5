"""The lens and vLLM's CUDA graphs (entropy_lens.vllm.graph_options): on a GPU, graphs that leave attention
out (piecewise) unless the caller chose, and a mode that captures attention refused in one line; elsewhere
the engine arguments as given. Pure dictionaries: no vLLM here."""

import pytest

from entropy_lens.errors import EntropyLensError
from entropy_lens.vllm import CAPTURING, graph_options


def test_a_gpu_engine_gets_piecewise_graphs_and_keeps_the_rest_of_its_config():
    assert graph_options({}, gpu=True) == {"compilation_config": {"cudagraph_mode": "PIECEWISE"}}
    given = {"tensor_parallel_size": 2, "compilation_config": {"mode": 3}}
    assert graph_options(given, gpu=True) == {
        "tensor_parallel_size": 2,
        "compilation_config": {"mode": 3, "cudagraph_mode": "PIECEWISE"},
    }
    assert given["compilation_config"] == {"mode": 3}  # the caller's dict is not changed
    for chosen in ("PIECEWISE", "NONE", "none"):
        options = {"compilation_config": {"cudagraph_mode": chosen}}
        assert graph_options(options, gpu=True) == options


def test_without_a_gpu_or_with_eager_steps_nothing_changes():
    for options in ({}, {"compilation_config": {"cudagraph_mode": "FULL"}}):
        assert graph_options(options, gpu=False) == options
    eager = {"enforce_eager": True, "compilation_config": {"cudagraph_mode": "FULL"}}
    assert graph_options(eager, gpu=True) == eager


@pytest.mark.parametrize("mode", CAPTURING)
def test_a_mode_that_captures_attention_is_refused_in_one_line(mode):
    class Mode:  # vLLM's CUDAGraphMode is an enum: its name is read
        name = mode

    for given in (mode, mode.lower(), Mode()):
        with pytest.raises(
            EntropyLensError, match=f"cudagraph_mode={mode} captures attention.*PIECEWISE"
        ) as err:
            graph_options({"compilation_config": {"cudagraph_mode": given}}, gpu=True)
        assert "\n" not in str(err.value)
