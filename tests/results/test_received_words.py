"""Issue 65, item 8: what the key statistics' messages say. main's summary said "over the last 1000 rows of
each window" of a 16-token scan, ScanResult.received("entropy") said "scan with --stats entropy" of a file
holding entropy, and a misspelt name or a squared maximum got the same wrong fix."""

import pytest

from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import attention_received
from entropy_lens.results.spans import summary
from entropy_lens.runs.scan import ScanConfig, scan


@pytest.fixture(scope="module")
def result():
    config = ScanConfig(
        model="tiny-nope", length=16, samples=1, stats="received,received_max", query_window=1000
    )
    return scan(config, progress=False)


def test_a_window_longer_than_the_scan_counts_every_row(result):
    text = summary(result)
    assert "over every row" in text and "last 1000" not in text


@pytest.mark.parametrize(
    "call, message",
    [
        (
            {"name": "entropy"},
            r"^entropy is a row statistic, by query position: read it with result.stat\('entropy'\)",
        ),
        ({"name": "recieved"}, r"^'recieved' is no key statistic \(did you mean received\?\)"),
        ({"name": "received_max", "squared": True}, r"^received_max is a maximum and has no mean square"),
        ({"name": "received_mean"}, r"holds no 'received_mean' .* scan with --stats received_mean"),
    ],
)
def test_received_names_what_is_wrong_and_a_fix_that_works(result, call, message):
    with pytest.raises(EntropyLensError, match=message) as err:
        result.received(**call)
    assert "\n" not in str(err.value) and "--stats entropy" not in str(err.value)


def test_all_beside_a_key_statistic_is_named_as_that():
    import torch

    q = k = torch.zeros(1, 1, 4, 8)
    with pytest.raises(
        ValueError, match=r"^`all` cannot be combined with other key statistics \(got all,received\)"
    ):
        attention_received(q, k, softmax_scale=1.0, stats="all,received")
    with pytest.raises(ValueError, match=r"unknown key statistic \['recieved'\] \(did you mean received\?\)"):
        attention_received(q, k, softmax_scale=1.0, stats="recieved")
