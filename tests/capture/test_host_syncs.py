"""A capturing layer on a GPU never stops the host (issue 69, fixed costs): no tensor is read as a Python
number and nothing is copied between devices per layer. A GPU is simulated by treating the CPU as a device
whose reads synchronise (`call.DEFERRED_CHECK_DEVICES`): the check of a layer's inputs is then left to the
host sums, which refuse a forward with NaN or inf there, naming the layer, before any of it is summed."""

import collections

import numpy as np
import pytest
import torch
from tiny import make_tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from entropy_lens.capture import EntropyRecorder, call
from entropy_lens.errors import EntropyLensError

# what reads a tensor's contents on the host: on a GPU each one waits for the device
READS = ("aten._local_scalar_dense", "aten.equal", "aten.nonzero", "aten.is_nonzero", "aten.masked_select")


class HostReads(TorchDispatchMode):
    """Counts the operators of READS that run inside the block."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func).rsplit(".", 1)[0]
        if name in READS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def as_gpu(monkeypatch):
    monkeypatch.setattr(call, "DEFERRED_CHECK_DEVICES", ("cpu",))


@pytest.fixture(scope="module")
def models():
    return {n: make_tiny_model(n_layers=n).eval() for n in (2, 4)}


def _reads(model, ids, recorder=None, **kwargs) -> collections.Counter:
    with torch.no_grad(), HostReads() as reads:
        if recorder is None:
            model(ids, **kwargs)
        else:
            with recorder:
                model(ids, **kwargs)
    return reads.counts


def _added_reads(model, ids, backend, fused, **kwargs) -> collections.Counter:
    """The reads a recorder adds to a forward (after a warm-up forward: "auto"'s first calls and plans)."""
    _reads(model, ids, EntropyRecorder(model, fused=fused, backend=backend), **kwargs)
    recorder = EntropyRecorder(model, fused=fused, backend=backend)
    added = _reads(model, ids, recorder, **kwargs)
    added.subtract(_reads(model, ids, **kwargs))
    assert np.isfinite(recorder.entropy).all()
    return +added


@pytest.mark.parametrize("fused", ["on", "off"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("backend", ["torch_chunked", "auto"])
def test_a_recorded_forward_reads_the_device_no_more_often_per_layer(models, as_gpu, fused, padded, backend):
    """Whatever a recorder reads, it reads once per forward (a padded batch's mask, checked once to be
    key padding), never once per layer: a model of 4 layers adds the reads one of 2 layers adds."""
    ids = torch.arange(3, 35).view(2, 16)
    kwargs = (
        {"attention_mask": torch.ones_like(ids).index_fill_(1, torch.tensor([0, 1]), 0)} if padded else {}
    )
    added = {n: _added_reads(model, ids, backend, fused, **kwargs) for n, model in models.items()}
    assert added[2] == added[4]
    assert sum(added[2].values()) <= (3 if padded else 0), added[2]


def test_without_a_device_the_inputs_are_checked_in_the_layer(models):
    """On the CPU a read costs nothing: the checks stay where the layer runs (the inputs' and the scores'
    range, one read each per layer)."""
    ids = torch.arange(3, 19).unsqueeze(0)
    added = _added_reads(models[4], ids, "auto", "on")
    assert added == {"aten._local_scalar_dense": 8}


@pytest.mark.parametrize("where", ["q_proj", "k_proj", "v_proj"])
def test_a_forward_with_nan_is_refused_when_its_statistics_are_read(as_gpu, where):
    model = make_tiny_model(n_layers=3).eval()
    ids = torch.arange(3, 19).unsqueeze(0)
    with torch.no_grad():
        getattr(model.model.layers[1].self_attn, where).weight[2, 0] = float("nan")
        with EntropyRecorder(model, fused="on") as rec:
            model(ids)  # the layer does not stop the host to look
        tensor = {"q_proj": "query", "k_proj": "key", "v_proj": "value"}[where]
        refused = rf"^layer 1's {tensor}( and \w+)* held NaN or inf: .*--dtype float32"
        for _ in range(2):  # refused again when asked again, never read as numbers
            with pytest.raises(EntropyLensError, match=refused):
                rec.mean("entropy")


def test_a_refused_layer_adds_nothing_to_the_callers_sums(as_gpu):
    model = make_tiny_model(n_layers=3).eval()
    ids = torch.arange(3, 19).unsqueeze(0)
    sums = {name: torch.zeros(3, 4, 16, dtype=torch.float64) for name in ("entropy", "entropy_sq")}
    sums["count"] = torch.zeros(16, dtype=torch.int64)
    with torch.no_grad():
        model.model.layers[2].self_attn.k_proj.weight[0, 0] = float("inf")
        with EntropyRecorder(model, fused="off") as rec:
            model(ids)
        with pytest.raises(EntropyLensError, match=r"^layer 2's key held NaN or inf"):
            rec.drain_into(sums)
    # the layers before it were summed as they landed (a scan drops the batch); layer 2 added nothing
    assert not sums["entropy"][2].any() and not sums["entropy_sq"][2].any()
    assert sums["entropy"][:2, :, 1:].all() and (sums["count"] == 1).all()  # position 0 sees one key: 0


def test_key_statistics_of_a_refused_forward_are_refused_too(as_gpu):
    model = make_tiny_model(n_layers=3).eval()
    ids = torch.arange(3, 19).unsqueeze(0)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[1, 1] = float("nan")
        with EntropyRecorder(model, stats=("entropy", "received")) as rec:
            model(ids)
    with pytest.raises(EntropyLensError, match=r"^layer 0's query held NaN or inf"):
        rec.received()


def test_scores_that_may_leave_float32_are_refused_when_read(as_gpu):
    """The scores' bound (kernels.contract.score_bound) rides with the check: no kernel reads it."""
    model = make_tiny_model(n_layers=2).eval()
    ids = torch.arange(3, 19).unsqueeze(0)
    with torch.no_grad():
        model.model.layers[1].self_attn.q_proj.weight.mul_(1e37)  # finite queries, scores beyond float32
        with EntropyRecorder(model, fused="on") as rec:
            model(ids)
    with pytest.raises(
        EntropyLensError, match=r"^layer 1's scores λ·q·k may leave float32's range .*reference"
    ):
        rec.mean("entropy")
