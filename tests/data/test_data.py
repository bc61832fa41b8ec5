"""entropy_lens.data: corpora -> documents, and documents -> packed, sampled chunks."""

from __future__ import annotations

import gzip
import json
import platform

import numpy as np
import pytest
from tiny import TEXT, make_tokenizer

from entropy_lens.data import BUNDLED_CORPORA, Chunks, clear_cache, load_documents, token_chunks
from entropy_lens.data import chunks as chunks_module
from entropy_lens.errors import EntropyLensError

NOVELS = [
    "emma",
    "mansfield_park",
    "northanger_abbey",
    "persuasion",
    "pride_and_prejudice",
    "sense_and_sensibility",
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def reference_stream(tokenizer, documents: list[str], separator: int | None) -> np.ndarray:
    """The packed stream built the slow, obvious way: one tokenizer call per document."""
    out: list[int] = []
    for doc in documents:
        out += tokenizer(doc, add_special_tokens=False)["input_ids"]
        out += [] if separator is None else [separator]
    return np.array(out, dtype=np.int64)


@pytest.fixture
def three_docs(tmp_path):
    """A folder of three distinct .txt documents, about 4k characters each."""
    words = TEXT.split()
    rng = np.random.default_rng(1)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(3):
        text = " ".join(rng.choice(words, size=700))
        (folder / f"{i}.txt").write_text(text, encoding="utf-8")
    return folder


# --- corpora -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUNDLED_CORPORA)
def test_every_bundled_name_loads(name):
    documents, description = load_documents(name)
    assert documents and all(isinstance(d, str) and d for d in documents)
    assert description.startswith(name) and "document" in description


def test_austen_is_six_novels_in_file_order():
    documents, _ = load_documents("austen")
    assert len(documents) == 6
    assert "Emma Woodhouse" in documents[0][:5000]
    assert sum(map(len, documents)) > 3_500_000
    for i, novel in enumerate(NOVELS):
        assert load_documents(f"austen:{novel}")[0] == [documents[i]]


def test_one_novel_and_held_out_split():
    everything, _ = load_documents("austen")
    (persuasion,), description = load_documents("austen:persuasion")
    assert description == "austen:persuasion (1 document)"
    assert "Anne Elliot" in persuasion
    rest, description = load_documents("austen-minus:persuasion")
    assert len(rest) == 5 and persuasion not in rest
    assert rest == [d for d in everything if d != persuasion]
    assert description.startswith("austen-minus:persuasion")


def test_unique_prefix_selects_a_novel():
    assert load_documents("austen:pride") == load_documents("austen:pride_and_prejudice")
    rest, description = load_documents("austen-minus:sense")
    assert len(rest) == 5 and description.startswith("austen-minus:sense_and_sensibility")


@pytest.mark.parametrize(
    "data, expected",
    [
        ("austen:p", ["persuasion", "pride_and_prejudice"]),  # ambiguous: both are named
        ("austen:ulysses", ["emma", "sense_and_sensibility"]),  # unknown: the choices are listed
        ("austen-minus:", ["emma"]),
    ],
)
def test_ambiguous_or_unknown_novel(data, expected):
    with pytest.raises(EntropyLensError) as err:
        load_documents(data)
    assert all(name in str(err.value) for name in expected)


def test_stdlib_is_python_source():
    documents, description = load_documents("stdlib")
    assert len(documents) > 200
    assert platform.python_version() in description
    pythonic = sum(("def " in d or "import " in d) for d in documents)
    assert pythonic > 0.8 * len(documents)


def test_txt_file_and_folder(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.txt").write_text("third", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first", encoding="utf-8")
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"second"))
    (tmp_path / "notes.md").write_text("ignored", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    assert load_documents(str(tmp_path / "a.txt"))[0] == ["first"]
    documents, description = load_documents(str(tmp_path))
    assert documents == ["first", "third", "second"]  # sorted by relative path: a, b/z, c
    assert description == f"{tmp_path} (3 documents)"


def test_jsonl(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "one", "id": 1}\n\n{"text": "two"}\n', encoding="utf-8")
    assert load_documents(str(path))[0] == ["one", "two"]


@pytest.mark.parametrize("bad_line", ["not json", '{"body": "x"}', '{"text": 3}', '["text"]'])
def test_bad_jsonl_line_names_its_number(tmp_path, bad_line):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two"}\n' + bad_line + "\n", encoding="utf-8")
    with pytest.raises(EntropyLensError, match='line 3 .*"text"'):
        load_documents(str(path))


@pytest.mark.parametrize("kind", ["missing", "folder without txt", "csv", "empty txt", "npy"])
def test_bad_paths_say_what_is_accepted(tmp_path, kind):
    files = {"csv": ("x.csv", "a,b"), "empty txt": ("e.txt", ""), "npy": ("ids.npy", "")}
    if kind in files:
        name, text = files[kind]
        (tmp_path / name).write_text(text)
    data = {"missing": str(tmp_path / "missing.txt"), "folder without txt": str(tmp_path)}.get(
        kind, str(tmp_path / files.get(kind, ("",))[0])
    )
    with pytest.raises(EntropyLensError) as err:
        load_documents(data)
    message = str(err.value)
    assert "; " in message and "\n" not in message


def test_unknown_name_lists_bundled_names_and_file_kinds():
    with pytest.raises(EntropyLensError) as err:
        load_documents("wikitext")
    for word in ["austen", "austen-minus:<novel>", "stdlib", "persuasion", ".txt", ".jsonl"]:
        assert word in str(err.value)


def test_non_utf8_text_is_an_error(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(EntropyLensError, match="UTF-8"):
        load_documents(str(tmp_path / "latin1.txt"))


# --- token_chunks ----------------------------------------------------------------------------


def test_chunks_are_consecutive_slices_of_the_packed_stream(tok, three_docs):
    documents, _ = load_documents(str(three_docs))
    stream = reference_stream(tok, documents, tok.eos_token_id)
    length = 31
    c = token_chunks(tok, str(three_docs), length=length, samples=5, seed=3)
    assert isinstance(c, Chunks)
    assert c.ids.shape == (5, length + 1) and c.ids.dtype == np.int64 and c.length == length
    assert c.n_tokens == len(stream) and c.n_available == len(stream) // (length + 1)
    assert c.separator_id == tok.eos_token_id == 1
    assert c.indices == sorted(set(c.indices)) and all(0 <= i < c.n_available for i in c.indices)
    for row, i in zip(c.ids, c.indices):
        np.testing.assert_array_equal(row, stream[i * (length + 1) : (i + 1) * (length + 1)])
    assert c.description == f"{three_docs} (3 documents, {len(stream):,} tokens)"


def test_bundled_novel_matches_independent_tokenisation(tok):
    (novel,), _ = load_documents("austen:northanger_abbey")
    stream = reference_stream(tok, [novel], tok.eos_token_id)
    c = token_chunks(tok, "austen:north", length=1024, samples=4)
    assert c.n_tokens == len(stream) and c.description.startswith("austen:northanger_abbey (1 document, ")
    for row, i in zip(c.ids, c.indices):
        np.testing.assert_array_equal(row, stream[i * 1025 : (i + 1) * 1025])


def test_separator_sits_between_documents(tok, three_docs):
    documents, _ = load_documents(str(three_docs))
    lengths = [len(tok(d, add_special_tokens=False)["input_ids"]) for d in documents]
    c = token_chunks(tok, str(three_docs), length=7, samples=1)
    stream = chunks_module.packed_stream(tok, str(three_docs))[0]
    ends = np.cumsum(np.array(lengths) + 1) - 1  # each document is followed by </s>
    assert (stream[ends] == c.separator_id).all()
    assert (stream == c.separator_id).sum() == 3  # and nowhere else


def test_separator_falls_back_to_bos_then_none(three_docs):
    no_eos = make_tokenizer()
    no_eos.eos_token = None
    c = token_chunks(no_eos, str(three_docs), length=7, samples=1)
    assert c.separator_id == 0
    neither = make_tokenizer()
    neither.eos_token = neither.bos_token = None
    c2 = token_chunks(neither, str(three_docs), length=7, samples=1)
    assert c2.separator_id is None and c2.n_tokens == c.n_tokens - 3


def test_selection_is_deterministic_for_a_seed(tok, three_docs):
    a = token_chunks(tok, str(three_docs), length=8, samples=20, seed=0)
    b = token_chunks(tok, str(three_docs), length=8, samples=20, seed=0)
    c = token_chunks(tok, str(three_docs), length=8, samples=20, seed=1)
    assert a.n_available > 200
    np.testing.assert_array_equal(a.ids, b.ids)
    assert a.indices == b.indices and a.indices != c.indices
    assert not np.array_equal(a.ids, c.ids)


def test_stream_is_tokenised_once_and_refreshed_when_the_text_changes(tok, three_docs, monkeypatch):
    calls = []
    pack = chunks_module.tokenize_and_pack
    monkeypatch.setattr(chunks_module, "tokenize_and_pack", lambda *a: calls.append(1) or pack(*a))
    first = token_chunks(tok, str(three_docs), length=8, samples=2)
    token_chunks(make_tokenizer(), str(three_docs), length=16, samples=3, seed=5)  # an equal tokenizer
    assert len(calls) == 1
    first.ids[:] = -1  # rows are copies: writing to them leaves the cache intact
    assert (token_chunks(tok, str(three_docs), length=8, samples=2).ids >= 0).all()
    (three_docs / "0.txt").write_text("something else entirely", encoding="utf-8")
    token_chunks(tok, str(three_docs), length=8, samples=2)
    token_chunks(make_tokenizer(vocab_size=280), str(three_docs), length=8, samples=2)
    assert len(calls) == 3


def test_general_tokenizer_path_gives_the_same_ids(tok, three_docs):
    fast = token_chunks(tok, str(three_docs), length=16, samples=10)
    clear_cache()
    other = make_tokenizer()
    other.backend_tokenizer.enable_truncation(8)  # left-over state: the fast path must not be used
    assert chunks_module.plain_backend(other) is None
    slow = token_chunks(other, str(three_docs), length=16, samples=10)
    np.testing.assert_array_equal(fast.ids, slow.ids)


# --- .npy ----------------------------------------------------------------------------------------


def test_npy_rows_are_used_as_is(tok, tmp_path):
    rows = np.random.default_rng(0).integers(0, len(tok), size=(50, 9), dtype=np.int32)
    np.save(tmp_path / "ids.npy", rows)
    c = token_chunks(tok, str(tmp_path / "ids.npy"), length=8, samples=6, seed=2)
    assert c.ids.dtype == np.int64 and c.ids.shape == (6, 9)
    np.testing.assert_array_equal(c.ids, rows[c.indices])
    assert c.n_available == 50 and c.n_tokens == 450 and c.separator_id is None
    again = token_chunks(tok, str(tmp_path / "ids.npy"), length=8, samples=6, seed=2)
    assert again.indices == c.indices


@pytest.mark.parametrize(
    "array, match",
    [
        (np.zeros((4, 12), np.int64), "rows of 12 tokens .*needs 9 .*--len 11"),
        (np.zeros((4, 9), np.float32), "float32, not integer"),
        (np.full((4, 9), 300, np.int64), "token id 300 .*0..299"),
        (np.full((4, 9), -1, np.int64), "token id -1"),
        (np.zeros(36, np.int64), "not 2-D"),
        (np.zeros((0, 9), np.int64), "no rows"),
    ],
)
def test_bad_npy_is_an_error(tok, tmp_path, array, match):
    np.save(tmp_path / "ids.npy", array)
    with pytest.raises(EntropyLensError, match=match):
        token_chunks(tok, str(tmp_path / "ids.npy"), length=8, samples=1)


def test_npy_rows_need_no_tokenizer_and_text_does(tok, tmp_path):
    """Token ids are read without a tokenizer (a model folder without one scans them, issue 70); their
    range is then the model's to check, but for a negative id; text without a tokenizer is refused."""
    rows = np.random.default_rng(1).integers(0, 5000, size=(4, 9))
    np.save(tmp_path / "ids.npy", rows)
    c = token_chunks(None, str(tmp_path / "ids.npy"), length=8, samples=2)
    np.testing.assert_array_equal(c.ids, rows[c.indices])
    np.save(tmp_path / "neg.npy", np.full((4, 9), -2))
    with pytest.raises(EntropyLensError, match="token id -2; pass token ids of 0 or more"):
        token_chunks(None, str(tmp_path / "neg.npy"), length=8, samples=1)
    with pytest.raises(EntropyLensError, match="is text, which needs the model's tokenizer"):
        token_chunks(None, "austen:persuasion", length=8, samples=1)


def test_missing_npy_is_an_error(tok, tmp_path):
    with pytest.raises(EntropyLensError, match="not a file"):
        token_chunks(tok, str(tmp_path / "nope.npy"), length=8, samples=1)


# --- errors that say the fix -----------------------------------------------------------------------


def test_len_below_two(tok):
    with pytest.raises(EntropyLensError, match="--len must be at least 2.*pass --len 2 or more"):
        token_chunks(tok, "austen:persuasion", length=1, samples=1)
    with pytest.raises(EntropyLensError, match="--samples must be at least 1"):
        token_chunks(tok, "austen:persuasion", length=8, samples=0)


def test_len_longer_than_the_corpus(tok, three_docs):
    n = token_chunks(tok, str(three_docs), length=8, samples=1).n_tokens
    with pytest.raises(EntropyLensError) as err:
        token_chunks(tok, str(three_docs), length=n, samples=1)
    message = str(err.value)
    assert f"needs {n + 1:,} tokens per chunk" in message and f"has {n:,} tokens" in message
    assert "more text or a smaller --len" in message


def test_too_many_samples(tok, three_docs):
    n_available = token_chunks(tok, str(three_docs), length=512, samples=1).n_available
    with pytest.raises(EntropyLensError) as err:
        token_chunks(tok, str(three_docs), length=512, samples=n_available + 1)
    message = str(err.value)
    assert f"fills only {n_available} chunks of 513 tokens" in message
    assert f"pass --samples {n_available} or fewer, a smaller --len, or more --data" in message


def test_data_as_jsonl_packs_like_txt(tok, tmp_path, three_docs):
    documents, _ = load_documents(str(three_docs))
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents), encoding="utf-8")
    a = token_chunks(tok, str(path), length=16, samples=5)
    b = token_chunks(tok, str(three_docs), length=16, samples=5)
    np.testing.assert_array_equal(a.ids, b.ids)


def test_a_missing_data_path_lists_every_accepted_form(tmp_path):
    with pytest.raises(EntropyLensError) as err:
        token_chunks(None, str(tmp_path / "nothere.txt"), length=8, samples=1)
    message = str(err.value)
    assert all(form in message for form in ("austen:<novel>", "stdlib", ".txt", ".jsonl", ".npy"))


# --- sliding windows (stride) ----------------------------------------------------------------------


@pytest.mark.parametrize("length, stride", [(16, 4), (16, 16), (7, 3), (8, 1)])
def test_strided_rows_are_the_windows_starting_every_stride_tokens(tok, three_docs, length, stride):
    documents, _ = load_documents(str(three_docs))
    stream = reference_stream(tok, documents, tok.eos_token_id)
    width = length + 1
    c = token_chunks(tok, str(three_docs), length=length, samples=9, seed=4, stride=stride)
    assert c.ids.shape == (9, width) and c.ids.dtype == np.int64 and c.ids.flags.writeable
    assert c.n_available == (len(stream) - width) // stride + 1 and c.n_tokens == len(stream)
    assert c.indices == sorted(set(c.indices)) and all(0 <= i < c.n_available for i in c.indices)
    for row, i in zip(c.ids, c.indices):
        np.testing.assert_array_equal(row, stream[i * stride : i * stride + width])
    # the targets of each window's last `stride` positions: no token is scored twice
    scored = np.concatenate([np.arange(i * stride + width - stride, i * stride + width) for i in c.indices])
    assert len(np.unique(scored)) == len(scored) == 9 * stride


def test_strided_selection_is_seeded_and_none_keeps_the_chunks(tok, three_docs):
    a = token_chunks(tok, str(three_docs), length=8, samples=20, seed=0, stride=2)
    b = token_chunks(tok, str(three_docs), length=8, samples=20, seed=0, stride=2)
    assert a.indices == b.indices and np.array_equal(a.ids, b.ids)
    assert token_chunks(tok, str(three_docs), length=8, samples=20, seed=1, stride=2).indices != a.indices
    plain = token_chunks(tok, str(three_docs), length=8, samples=20, seed=0)
    default = token_chunks(tok, str(three_docs), length=8, samples=20, seed=0, stride=None)
    assert plain.indices == default.indices and np.array_equal(plain.ids, default.ids)
    assert a.n_available > 4 * plain.n_available  # windows every 2 tokens vs chunks every 9


@pytest.mark.parametrize("stride", [0, -3])
def test_stride_below_one(tok, stride):
    with pytest.raises(EntropyLensError, match="--stride must be at least 1.*pass --stride 1 or more"):
        token_chunks(tok, "austen:persuasion", length=8, samples=1, stride=stride)


def test_too_many_strided_samples(tok, three_docs):
    n = token_chunks(tok, str(three_docs), length=64, samples=1, stride=32).n_available
    with pytest.raises(EntropyLensError) as err:
        token_chunks(tok, str(three_docs), length=64, samples=n + 1, stride=32)
    message = str(err.value)
    assert f"fills only {n:,} windows of 65 tokens (--len + 1) starting every 32 tokens" in message
    assert f"pass --samples {n:,} or fewer, a smaller --stride or --len, or more --data" in message


def test_npy_with_a_stride_is_refused(tok, tmp_path):
    np.save(tmp_path / "ids.npy", np.zeros((4, 9), np.int64))
    with pytest.raises(EntropyLensError) as err:
        token_chunks(tok, str(tmp_path / "ids.npy"), length=8, samples=1, stride=2)
    message = str(err.value)
    assert len(message.splitlines()) == 1 and "already holds its rows" in message
    assert "omit --stride" in message


# ---- passkey prompts --------------------------------------------------------------------------------


def test_passkey_prompts_fill_the_window_and_place_the_needle():
    """prompt + answer = the window; the question ends it; the key's positions hold the key (twice); the
    needle sits at a filler-sentence boundary that moves with the depth; too short a window is refused."""
    import numpy as np
    from tiny import make_tokenizer

    from entropy_lens.data.passkey import FILLER, QUESTION, passkey_prompt
    from entropy_lens.errors import EntropyLensError

    tok = make_tokenizer(300)
    question = tok(QUESTION, add_special_tokens=False)["input_ids"]
    starts = []
    for depth in np.arange(0.0, 1.0, 0.1):
        p = passkey_prompt(tok, length=600, depth=float(depth), key=48213, rng=np.random.default_rng(3))
        assert len(p.ids) + len(p.answer) == 600 and list(p.ids[-len(question) :]) == question
        assert tok.decode(p.answer).strip() == "48213" and len(p.key_positions) == 2 * len(p.answer)
        assert tok.decode(p.ids[p.key_positions]).replace(" ", "") == "4821348213"
        assert 0 < p.key_positions[0] - p.needle_start <= len(tok(" The pass key is")["input_ids"])
        starts.append(p.needle_start)
        assert tok.decode(p.ids[: p.needle_start]).endswith(".")  # after a sentence (or the instruction)
        assert FILLER.strip()[:40] in tok.decode(p.ids)
    assert starts == sorted(starts) and len(set(starts)) >= 8  # the depths are distinct
    with pytest.raises(EntropyLensError, match="--lens 40 is too short"):
        passkey_prompt(tok, length=40, depth=0.5, key=48213, rng=np.random.default_rng(0))


def test_a_tokenizer_that_cannot_write_the_task_is_refused():
    from entropy_lens.data.passkey import check_tokenizer
    from entropy_lens.errors import EntropyLensError

    class NoDigits:  # writes letters back, loses digits (an unknown-token vocabulary)
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

        def decode(self, ids):
            return "".join("?" if chr(i).isdigit() else chr(i) for i in ids)

    with pytest.raises(
        EntropyLensError, match="cannot express the passkey task: '12345' comes back as '\\?\\?\\?\\?\\?'"
    ):
        check_tokenizer(NoDigits())
