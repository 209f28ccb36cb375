import csv
import gzip
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import similearn.datasets._text as text_mod
from similearn.datasets import fetch, get_data_home, load_quora_pairs, load_sts, sha256sum

DATA = Path(__file__).parent / "data"
QUORA = DATA / "quora_sample.tsv"
STS = DATA / "sts_sample.csv"

QUESTIONS = [
    "What is the step by step guide to invest in share market in india?",  # qid 1
    "What is the step by step guide to invest in share market?",  # qid 2
    'How do I read a "quoted" word?',  # qid 3
    "How do I read quotes?",  # qid 4
    "Tab\tinside and\nnewline inside",  # qid 5
    "Plain question five?",  # qid 6
    "Why is the sky blue?",  # qid 9
]


def _load_quiet(path, **kw):
    with pytest.warns(UserWarning, match="2 row"):
        return load_quora_pairs(path, **kw)


def _check_quora(b):
    assert b.questions == QUESTIONS
    np.testing.assert_array_equal(b.qids, [1, 2, 3, 4, 5, 6, 9])
    assert b.qids.dtype == np.int64
    np.testing.assert_array_equal(b.pairs, [[0, 1], [2, 3], [4, 5], [0, 2], [6, 1]])
    assert b.pairs.dtype == np.int64 and b.pairs.shape == (5, 2)
    np.testing.assert_array_equal(b.labels, [0, 1, 0, 0, 1])
    assert b.labels.dtype == np.int8
    np.testing.assert_array_equal(b.pair_ids, [0, 1, 2, 4, 5])
    assert b.pair_ids.dtype == np.int64
    assert b.n_skipped == 2


def test_quora_fixture():
    _check_quora(_load_quiet(QUORA))


def test_quora_gz_and_zip(tmp_path):
    gz = tmp_path / "q.tsv.gz"
    gz.write_bytes(gzip.compress(QUORA.read_bytes()))
    _check_quora(_load_quiet(gz))
    zp = tmp_path / "q.zip"
    with zipfile.ZipFile(zp, "w") as zf:
        zf.write(QUORA, "quora_duplicate_questions.tsv")
        zf.writestr("__MACOSX/._quora_duplicate_questions.tsv", b"junk")
    _check_quora(_load_quiet(zp))
    bad = tmp_path / "two.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("a.tsv", "x")
        zf.writestr("b.tsv", "y")
    with pytest.raises(ValueError, match="exactly one data file"):
        load_quora_pairs(bad)


def test_quora_kaggle_csv_with_bom(tmp_path):
    # Kaggle's train.csv: comma-separated, every field quoted, UTF-8 BOM
    lines = QUORA.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(lines, newline=""), delimiter="\t"))
    buf = io.StringIO(newline="")
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    p = tmp_path / "train.csv"
    p.write_bytes(b"\xef\xbb\xbf" + buf.getvalue().encode("utf-8"))
    _check_quora(_load_quiet(p))


@pytest.mark.parametrize("content, match", [
    ("id\tqid1\tqid2\tq1\tq2\tlabel\n", "expected the header"),
    ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\ta\tb\t2\n", "line 2: is_duplicate"),
    ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\tx\ta\tb\t1\n", "line 2: id, qid1 and qid2"),
    ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\ta\n", "line 2: expected 6 fields"),
    # an unbalanced quote swallows the rest of the file into one field
    ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\t\"a\tb\t0\n1\t3\t4\tc\td\t1\n",
     "expected 6 fields, got 4"),
])
def test_quora_malformed(tmp_path, content, match):
    p = tmp_path / "bad.tsv"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_quora_pairs(p)


def test_quora_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_quora_pairs(tmp_path / "nope.tsv")
    with pytest.raises(FileNotFoundError, match="quora_duplicate_questions.tsv"):
        load_quora_pairs(data_home=tmp_path)


def test_quora_download_from_file_url(tmp_path, monkeypatch):
    monkeypatch.setattr(text_mod, "QUORA_URL", QUORA.resolve().as_uri())
    monkeypatch.setenv("SIMILEARN_DATA", str(tmp_path / "home"))
    with pytest.warns(UserWarning) as rec:
        b = load_quora_pairs(download=True)
    assert any("unverified" in str(w.message) for w in rec)
    _check_quora(b)
    assert (tmp_path / "home" / "quora_duplicate_questions.tsv").read_bytes() == QUORA.read_bytes()
    # pinned checksum: verified, no "unverified" warning
    monkeypatch.setattr(text_mod, "QUORA_SHA256", sha256sum(QUORA))
    with pytest.warns(UserWarning) as rec:
        _check_quora(load_quora_pairs(tmp_path / "other.tsv", download=True))
    assert not any("unverified" in str(w.message) for w in rec)


def test_quora_download_without_network(tmp_path, monkeypatch):
    monkeypatch.setattr(text_mod, "QUORA_URL", (tmp_path / "missing.tsv").as_uri())
    target = tmp_path / "sub" / "q.tsv"
    with pytest.raises(OSError, match=re.escape(f"save it as {target}")):
        load_quora_pairs(target, download=True)
    assert not target.exists() and os.listdir(target.parent) == []
    with pytest.raises(OSError, match="uncompressed"):
        load_quora_pairs(tmp_path / "q.tsv.gz", download=True)


def test_sts_fixture():
    b = load_sts(STS)
    assert b.sentences1[2] == '"Quoted" start without an end'  # QUOTE_NONE: quotes kept
    assert b.sentences2[2] == 'A stray " quote.'
    assert b.sentences2[3] == "Another sentence."  # extra columns ignored
    np.testing.assert_array_equal(b.scores, [5.0, 3.8, 0.5, 2.75])
    assert b.scores.dtype == np.float64
    np.testing.assert_allclose(b.labels, b.scores / 5)
    assert b.genres == ["main-captions", "main-captions", "main-news", "main-forums"]
    assert len(b.sentences) == 7 and len(set(b.sentences)) == 7
    assert b.pairs.dtype == np.int64 and b.pairs.shape == (4, 2)
    assert [b.sentences[i] for i in b.pairs[:, 0]] == b.sentences1
    assert [b.sentences[i] for i in b.pairs[:, 1]] == b.sentences2
    assert b.pairs[0, 0] == b.pairs[3, 0]  # repeated sentence shares its index


def test_sts_gz(tmp_path):
    p = tmp_path / "sts-dev.csv.gz"
    p.write_bytes(gzip.compress(STS.read_bytes()))
    np.testing.assert_array_equal(load_sts(p).scores, load_sts(STS).scores)


@pytest.mark.parametrize("line, match", [
    ("g\tf\t2012\t1\t5.5\ta\tb\n", "line 1: score must be a number in"),
    ("g\tf\t2012\t1\tnan\ta\tb\n", "line 1: score"),
    ("g\tf\t2012\t1\t3.0\ta\n", "line 1: expected at least 7"),
])
def test_sts_malformed(tmp_path, line, match):
    p = tmp_path / "sts.csv"
    p.write_text(line, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_sts(p)


def test_sts_split_and_missing(tmp_path):
    with pytest.raises(ValueError, match="split"):
        load_sts(split="validation")
    with pytest.raises(FileNotFoundError, match="sts-test.csv"):
        load_sts(data_home=tmp_path, split="test")


def test_sts_download_from_archive(tmp_path, monkeypatch):
    archive = tmp_path / "src" / "Stsbenchmark.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(STS, arcname="stsbenchmark/sts-dev.csv")
        tf.add(STS, arcname="stsbenchmark/sts-test.csv")
    monkeypatch.setattr(text_mod, "STS_URL", archive.as_uri())
    monkeypatch.setattr(text_mod, "STS_SHA256", sha256sum(archive))
    home = tmp_path / "home"
    b = load_sts(data_home=home, split="dev", download=True)
    np.testing.assert_array_equal(b.scores, [5.0, 3.8, 0.5, 2.75])
    assert (home / "stsbenchmark" / "sts-dev.csv").read_bytes() == STS.read_bytes()
    assert (home / "Stsbenchmark.tar.gz").exists()
    with pytest.raises(OSError, match="holds no sts-train.csv"):
        load_sts(data_home=home, split="train", download=True)
    assert not (home / "stsbenchmark" / "sts-train.csv").exists()
    with pytest.raises(OSError, match="can only provide"):
        load_sts(tmp_path / "mine.csv", data_home=home, download=True)


# ---------------------------------------------------------------------------
# fetch / get_data_home
# ---------------------------------------------------------------------------


def test_get_data_home(tmp_path, monkeypatch):
    monkeypatch.delenv("SIMILEARN_DATA", raising=False)
    assert get_data_home() == Path.home() / "similearn_data"
    monkeypatch.setenv("SIMILEARN_DATA", str(tmp_path))
    assert get_data_home() == tmp_path
    assert get_data_home(tmp_path / "x") == tmp_path / "x"


def test_fetch_checksum_ok(tmp_path):
    digest = hashlib.sha256(QUORA.read_bytes()).hexdigest()
    out = fetch(QUORA.resolve().as_uri(), tmp_path / "a" / "b.tsv", digest.upper())
    assert out == tmp_path / "a" / "b.tsv"
    assert out.read_bytes() == QUORA.read_bytes()
    assert os.listdir(tmp_path / "a") == ["b.tsv"]


def test_fetch_checksum_mismatch_leaves_nothing(tmp_path):
    dest = tmp_path / "d" / "b.tsv"
    with pytest.raises(OSError, match="checksum mismatch"):
        fetch(QUORA.resolve().as_uri(), dest, "0" * 64)
    assert os.listdir(tmp_path / "d") == []
    # an existing file is not replaced by a bad download
    dest.write_text("old")
    with pytest.raises(OSError, match="checksum mismatch"):
        fetch(QUORA.resolve().as_uri(), dest, "0" * 64)
    assert dest.read_text() == "old" and os.listdir(tmp_path / "d") == ["b.tsv"]


def test_fetch_unverified_warns(tmp_path):
    with pytest.warns(UserWarning, match="unverified"):
        fetch(QUORA.resolve().as_uri(), tmp_path / "x.tsv", None)
    assert sha256sum(tmp_path / "x.tsv") == hashlib.sha256(QUORA.read_bytes()).hexdigest()


def test_fetch_errors(tmp_path):
    with pytest.raises(OSError, match="could not download .*save it as"):
        fetch((tmp_path / "missing").as_uri(), tmp_path / "out" / "x")
    assert os.listdir(tmp_path / "out") == []
    with pytest.raises(OSError, match="could not download"):
        fetch("notascheme://host/x", tmp_path / "out" / "x")
    with pytest.raises(ValueError, match="sha256 must be"):
        fetch(QUORA.resolve().as_uri(), tmp_path / "x", "abc")
