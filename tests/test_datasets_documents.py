import ast
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import similearn.datasets._documents as doc_mod
from similearn.datasets import load_20newsgroups, load_hashing_mat, load_reuters21578, vectorize_documents

# ---------------------------------------------------------------------------
# 20 Newsgroups fixture
# ---------------------------------------------------------------------------

POST_A = (b"From: a@b.c\nSubject: Re: god\nLines: 5\n\n"
          b"In article <x@y> a@b.c writes:\n> quoted line\n|also quoted\nMy answer is caf\xe9.\n-- \nSig line\n")
POST_B = b"From: b@c.d\nSubject: table\n  \nrow one\n----------\nrow two\nJoe wrote:\n  > indented quote\nend\n"
POST_C = b"no header separator at all"
POST_D = b"Subject: gfx\n\nPixels.\n"
POST_E = b"Subject: space\n\nOrbit.\n"
POST_F = b"Subject: test atheism\n\nTest post.\n--\nbye"
POST_G = b"Subject: cars\n\nWheels.\n"

NG_TREE = {
    "20news-bydate-train/alt.atheism/10": POST_A,
    "20news-bydate-train/alt.atheism/9": POST_B,
    "20news-bydate-train/alt.atheism/.DS_Store": b"junk",
    "20news-bydate-train/sci.space/60000": POST_E,
    "20news-bydate-train/comp.graphics/37261": POST_D,
    "20news-bydate-train/comp.graphics/readme": POST_C,
    "20news-bydate-test/alt.atheism/53068": POST_F,
    "20news-bydate-test/rec.autos/100": POST_G,
}
NG_NAMES = ["alt.atheism", "comp.graphics", "rec.autos", "sci.space"]
NG_TRAIN_FILES = ["20news-bydate-train/alt.atheism/9", "20news-bydate-train/alt.atheism/10",
                  "20news-bydate-train/comp.graphics/37261", "20news-bydate-train/comp.graphics/readme",
                  "20news-bydate-train/sci.space/60000"]
NG_TEST_FILES = ["20news-bydate-test/alt.atheism/53068", "20news-bydate-test/rec.autos/100"]


def _write_tree(root, tree):
    for rel, data in tree.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    return root


def _write_tar(path, tree, prefix=""):
    with tarfile.open(path, "w:gz") as tf:
        for rel, data in tree.items():
            info = tarfile.TarInfo(prefix + rel)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def ng_dir(tmp_path):
    return _write_tree(tmp_path / "ng", NG_TREE)


def _text(rel):
    return NG_TREE[rel].decode("latin-1")


def test_ng_train(ng_dir):
    b = load_20newsgroups(ng_dir)
    assert b.filenames == NG_TRAIN_FILES
    assert b.data == [_text(f) for f in NG_TRAIN_FILES]
    assert b.data[1] == POST_A.decode("latin-1") and "café" in b.data[1]
    assert b.target_names == NG_NAMES
    np.testing.assert_array_equal(b.target, [0, 0, 1, 1, 3])
    assert b.target.dtype == np.int64
    assert b.path == str(ng_dir)
    assert "20 Newsgroups" in b.DESCR


def test_ng_test_and_all(ng_dir):
    t = load_20newsgroups(ng_dir, subset="test")
    assert t.filenames == NG_TEST_FILES
    assert t.data == ["Subject: test atheism\n\nTest post.\n--\nbye", "Subject: cars\n\nWheels.\n"]
    np.testing.assert_array_equal(t.target, [0, 2])
    assert t.target_names == NG_NAMES
    a = load_20newsgroups(ng_dir, subset="all")
    assert a.filenames == NG_TRAIN_FILES + NG_TEST_FILES
    np.testing.assert_array_equal(a.target, [0, 0, 1, 1, 3, 0, 2])


@pytest.mark.parametrize("prefix", ["", "some/dir/"])
def test_ng_tar_matches_dir(tmp_path, ng_dir, prefix):
    arc = _write_tar(tmp_path / "20news-bydate.tar.gz", NG_TREE, prefix)
    for subset in ("train", "test", "all"):
        d = load_20newsgroups(ng_dir, subset=subset, remove=("headers",))
        t = load_20newsgroups(arc, subset=subset, remove=("headers",))
        assert t.path == str(arc)
        assert t.data == d.data and t.filenames == d.filenames and t.target_names == d.target_names
        np.testing.assert_array_equal(t.target, d.target)


def test_ng_default_path_from_data_home(tmp_path):
    _write_tar(tmp_path / "20news-bydate.tar.gz", NG_TREE)
    b = load_20newsgroups(data_home=tmp_path, subset="test")
    assert b.filenames == NG_TEST_FILES


@pytest.mark.parametrize("remove,post_a,post_b", [
    ((), POST_A.decode("latin-1"), POST_B.decode()),
    (("headers",),
     "In article <x@y> a@b.c writes:\n> quoted line\n|also quoted\nMy answer is café.\n-- \nSig line\n",
     "row one\n----------\nrow two\nJoe wrote:\n  > indented quote\nend\n"),
    (("footers",),
     "From: a@b.c\nSubject: Re: god\nLines: 5\n\nIn article <x@y> a@b.c writes:\n> quoted line\n|also quoted\n"
     "My answer is café.",
     "From: b@c.d\nSubject: table\n  \nrow one"),
    (("quotes",), "From: a@b.c\nSubject: Re: god\nLines: 5\n\nMy answer is café.\n-- \nSig line\n",
     "From: b@c.d\nSubject: table\n  \nrow one\n----------\nrow two\nend\n"),
    (("quotes", "footers", "headers"), "My answer is café.", "row one"),
    ("headers",
     "In article <x@y> a@b.c writes:\n> quoted line\n|also quoted\nMy answer is café.\n-- \nSig line\n",
     "row one\n----------\nrow two\nJoe wrote:\n  > indented quote\nend\n"),
])
def test_ng_remove(ng_dir, remove, post_a, post_b):
    b = load_20newsgroups(ng_dir, remove=remove)
    assert b.data[1] == post_a
    assert b.data[0] == post_b


def test_ng_remove_edge_cases(ng_dir):
    b = load_20newsgroups(ng_dir, remove=["headers"])
    assert b.data[3] == ""  # no blank line: all header
    assert b.data[2] == "Pixels.\n"
    f = load_20newsgroups(ng_dir, remove=("footers",))
    assert f.data[3] == "no header separator at all"  # no separator: unchanged
    t = load_20newsgroups(ng_dir, subset="test", remove=("headers", "footers"))
    assert t.data == ["Test post.", "Wheels.\n"]


def test_ng_errors(tmp_path, ng_dir):
    with pytest.raises(FileNotFoundError, match="not found. Pass download=True"):
        load_20newsgroups(tmp_path / "nope.tar.gz")
    with pytest.raises(ValueError, match="subset must be one of"):
        load_20newsgroups(ng_dir, subset="dev")
    with pytest.raises(ValueError, match=r"remove must only contain.*'signature'"):
        load_20newsgroups(ng_dir, remove=("headers", "signature"))
    with pytest.raises(ValueError, match="remove must be a tuple"):
        load_20newsgroups(ng_dir, remove=5)
    only_train = _write_tree(tmp_path / "half", {k: v for k, v in NG_TREE.items() if "train" in k})
    assert len(load_20newsgroups(only_train).data) == 5
    with pytest.raises(FileNotFoundError, match="holds no 20news-bydate-test folder"):
        load_20newsgroups(only_train, subset="all")
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not an archive")
    with pytest.raises(OSError, match="neither a folder nor a readable tar archive"):
        load_20newsgroups(bad)
    with pytest.raises(OSError, match="pass a path ending in .tar.gz"):
        load_20newsgroups(tmp_path / "folder", download=True)


def test_ng_download_uses_fetch(tmp_path, monkeypatch):
    calls = []

    def fake_fetch(url, path, sha256):
        calls.append((url, path, sha256))
        _write_tar(path, NG_TREE)
        return path

    monkeypatch.setattr(doc_mod, "fetch", fake_fetch)
    b = load_20newsgroups(data_home=tmp_path, download=True, subset="test")
    assert calls == [("http://qwone.com/~jason/20Newsgroups/20news-bydate.tar.gz",
                      tmp_path / "20news-bydate.tar.gz", None)]
    assert b.filenames == NG_TEST_FILES
    load_20newsgroups(data_home=tmp_path, download=True)  # present now: no second fetch
    assert len(calls) == 1


# ---------------------------------------------------------------------------
# Reuters-21578 fixture
# ---------------------------------------------------------------------------

def _el(newid, lewis, topics_attr, topics, text, text_type=None):
    tt = f' TYPE="{text_type}"' if text_type else ""
    ds = "".join(f"<D>{t}</D>" for t in topics)
    return (f'<REUTERS TOPICS="{topics_attr}" LEWISSPLIT="{lewis}" CGISPLIT="TRAINING-SET" OLDID="{5000 + newid}" '
            f'NEWID="{newid}">\n<DATE>26-FEB-1987 15:01:01.79</DATE>\n<TOPICS>{ds}</TOPICS>\n'
            f"<PLACES><D>usa</D></PLACES>\n<PEOPLE></PEOPLE>\n<ORGS></ORGS>\n<EXCHANGES></EXCHANGES>\n"
            f"<COMPANIES></COMPANIES>\n<UNKNOWN> \n&#5;&#5;&#5;C T\n&#22;&#22;&#1;f0704&#31;reute\n</UNKNOWN>\n"
            f"<TEXT{tt}>&#2;\n{text}</TEXT>\n</REUTERS>\n")


def _norm(title, body):
    return (f"<TITLE>{title}</TITLE>\n<DATELINE>    NEW YORK, Feb 26 - </DATELINE>"
            f"<BODY>{body}\n Reuter\n&#3;</BODY>")


SGM_HEAD = '<!DOCTYPE lewis SYSTEM "lewis.dtd">\n'
SGM_000 = (SGM_HEAD
           + _el(1, "TRAIN", "YES", ["earn"], _norm("PROFIT UP", "Net profit &lt;up&gt; 10 pct &amp; more."))
           + _el(2, "TRAIN", "YES", ["acq", "earn"], _norm("XYZ &amp; CO BUYS ABC", "Deal done."))
           + _el(3, "TRAIN", "NO", ["earn"], _norm("UNCHECKED", "Topics not checked."))
           + _el(4, "NOT-USED", "YES", ["earn"], _norm("UNUSED", "Never used."))
           + _el(5, "TRAIN", "YES", [], _norm("NO TOPIC", "Dropped."))
           + _el(6, "TEST", "YES", ["grain"], "<TITLE>GRAIN BRIEF</TITLE>\n", "BRIEF")
           + _el(13, "TRAIN", "YES", ["acq"], _norm("TAKEOVER", "Bid.")))
SGM_001 = (SGM_HEAD
           + _el(7, "TEST", "YES", ["earn"], _norm("BANK IN MUNICH", "Office in M\xfcnchen opened."))
           + _el(11, "TRAIN", "YES", ["crude"], _norm("OIL", "Crude\tprices."))
           + _el(8, "TRAIN", "YES", ["grain", "wheat"], _norm("WHEAT CROP", "Good harvest."))
           + _el(9, "TEST", "YES", ["acq"], "Unprocessed &amp; text &#127;here\n&#3;", "UNPROC")
           + _el(10, "TEST", "BYPASS", ["crude"], _norm("BYPASSED", "Bypass."))
           + _el(12, "TEST", "YES", ["wheat"], _norm("WHEAT", "Test wheat.")))

R_TEXT = {
    1: "PROFIT UP\nNet profit <up> 10 pct & more.\n Reuter",
    2: "XYZ & CO BUYS ABC\nDeal done.\n Reuter",
    3: "UNCHECKED\nTopics not checked.\n Reuter",
    6: "GRAIN BRIEF\n",
    7: "BANK IN MUNICH\nOffice in München opened.\n Reuter",
    8: "WHEAT CROP\nGood harvest.\n Reuter",
    9: "\nUnprocessed & text here",
    11: "OIL\nCrude\tprices.\n Reuter",
    12: "WHEAT\nTest wheat.\n Reuter",
    13: "TAKEOVER\nBid.\n Reuter",
}
R_ALL = ["acq", "crude", "earn", "grain", "wheat"]


def _write_reuters(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_bytes(text.encode("latin-1"))
    return folder


@pytest.fixture
def reuters_dir(tmp_path):
    return _write_reuters(tmp_path / "reuters", {"reut2-000.sgm": SGM_000, "reut2-001.sgm": SGM_001,
                                                 "README.txt": "<REUTERS NEWID=\"99\">ignored</REUTERS>"})


def _dense(t):
    return t.toarray().tolist()


def test_reuters_fixture_has_stray_byte(reuters_dir):
    assert b"M\xfcnchen" in (reuters_dir / "reut2-001.sgm").read_bytes()


def test_reuters_modapte_top10(reuters_dir):
    b = load_reuters21578(reuters_dir)
    np.testing.assert_array_equal(b.newids, [1, 2, 8, 11, 13])
    assert b.newids.dtype == np.int64
    assert b.data == [R_TEXT[i] for i in (1, 2, 8, 11, 13)]
    assert b.target_names == R_ALL
    assert sp.isspmatrix_csr(b.target) and b.target.dtype == np.int8
    assert _dense(b.target) == [[0, 0, 1, 0, 0], [1, 0, 1, 0, 0], [0, 0, 0, 1, 1], [0, 1, 0, 0, 0], [1, 0, 0, 0, 0]]
    t = load_reuters21578(reuters_dir, subset="test")
    np.testing.assert_array_equal(t.newids, [6, 7, 9, 12])
    assert t.data == [R_TEXT[i] for i in (6, 7, 9, 12)]
    assert t.target_names == R_ALL
    assert _dense(t.target) == [[0, 0, 0, 1, 0], [0, 0, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
    a = load_reuters21578(reuters_dir, subset="all", topics="all")
    np.testing.assert_array_equal(a.newids, [1, 2, 8, 11, 13, 6, 7, 9, 12])
    assert a.target_names == R_ALL and a.target.shape == (9, 5)
    assert "ModApte" in a.DESCR


def test_reuters_single_label_and_modlewis(reuters_dir):
    r = load_reuters21578(reuters_dir, topics="r52")
    assert r.target_names == ["acq", "earn"]  # crude: no test doc; grain, wheat: no single-topic train doc
    np.testing.assert_array_equal(r.newids, [1, 13])
    np.testing.assert_array_equal(r.target, [1, 0])
    assert r.target.dtype == np.int64 and r.target.ndim == 1
    r = load_reuters21578(reuters_dir, subset="test", topics="r8")
    assert r.target_names == ["acq", "earn"]
    np.testing.assert_array_equal(r.newids, [7, 9])
    np.testing.assert_array_equal(r.target, [1, 0])
    assert r.data == [R_TEXT[7], R_TEXT[9]]
    m = load_reuters21578(reuters_dir, split="modlewis")
    np.testing.assert_array_equal(m.newids, [1, 2, 3, 8, 11, 13])
    assert m.data[2] == R_TEXT[3]


def test_reuters_tar_matches_dir(tmp_path, reuters_dir):
    tree = {"reuters21578/" + f.name: f.read_bytes() for f in reuters_dir.iterdir()}
    arc = _write_tar(tmp_path / "reuters21578.tar.gz", tree)
    for kw in ({}, {"subset": "all", "topics": "r52"}):
        d, t = load_reuters21578(reuters_dir, **kw), load_reuters21578(arc, **kw)
        assert t.data == d.data and t.target_names == d.target_names and t.path == str(arc)
        np.testing.assert_array_equal(t.newids, d.newids)
        assert _dense(sp.csr_matrix(t.target)) == _dense(sp.csr_matrix(d.target))
    assert load_reuters21578(data_home=tmp_path).data == load_reuters21578(reuters_dir).data  # default name


def _generated_sgm():
    counts = {"earn": 12, "acq": 11, "money": 10, "grain": 9, "crude": 8, "trade": 7, "interest": 6, "ship": 5,
              "wheat": 4, "zinc": 3, "corn": 3, "tin": 1}
    parts, newid = [SGM_HEAD], 0
    for topic, n in counts.items():
        for _ in range(n):
            newid += 1
            parts.append(_el(newid, "TRAIN", "YES", [topic], _norm(topic.upper(), "x")))
        if topic != "money":
            newid += 1
            parts.append(_el(newid, "TEST", "YES", [topic], _norm(topic.upper(), "y")))
    parts.append(_el(1000, "TRAIN", "YES", ["tin", "acq"], _norm("MULTI", "z")))
    parts.append(_el(1001, "TEST", "YES", ["zinc", "corn"], _norm("MULTI TEST", "z")))
    parts.append(_el(1002, "TEST", "YES", ["zinc", "tin"], _norm("NO TOP10", "z")))
    return "".join(parts)


def test_reuters_topic_ranking(tmp_path):
    folder = _write_reuters(tmp_path / "gen", {"reut2-000.sgm": _generated_sgm()})
    top10 = ["acq", "corn", "crude", "earn", "grain", "interest", "money", "ship", "trade", "wheat"]
    b = load_reuters21578(folder)
    assert b.target_names == top10  # corn beats zinc (both 3) by name; tin dropped
    assert b.target.shape == (12 + 12 + 10 + 9 + 8 + 7 + 6 + 5 + 4 + 3, 10)  # no zinc/tin-only docs
    assert _dense(b.target[b.newids.tolist().index(1000)]) == [[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
    t = load_reuters21578(folder, subset="test")
    assert 1002 not in t.newids.tolist()
    assert _dense(t.target[t.newids.tolist().index(1001)]) == [[0, 1, 0, 0, 0, 0, 0, 0, 0, 0]]
    assert t.target.shape[0] == 9 + 1  # one test doc per top-10 topic but money, plus 1001
    assert load_reuters21578(folder, topics="top20").target_names == sorted(["tin", "zinc"] + top10)
    r52 = load_reuters21578(folder, topics="r52")
    assert r52.target_names == sorted(set(top10 + ["zinc", "tin"]) - {"money"})
    assert len(r52.data) == 79 - 10  # single-topic train docs but money's
    r8 = load_reuters21578(folder, topics="r8", subset="all")
    assert r8.target_names == ["acq", "crude", "earn", "grain", "interest", "ship", "trade", "wheat"]
    assert np.bincount(r8.target).tolist() == [12, 9, 13, 10, 7, 6, 8, 5]


def test_reuters_errors(tmp_path, reuters_dir):
    with pytest.raises(FileNotFoundError, match=r"not found\. Download the Reuters-21578.*archive\.ics\.uci\.edu"):
        load_reuters21578(tmp_path / "missing.tar.gz")
    with pytest.raises(FileNotFoundError, match="holds no reut2-NNN.sgm files"):
        load_reuters21578(_write_reuters(tmp_path / "empty", {"reut2-000.txt": SGM_000}))
    with pytest.raises(ValueError, match="subset must be one of"):
        load_reuters21578(reuters_dir, subset="val")
    with pytest.raises(ValueError, match="split must be one of"):
        load_reuters21578(reuters_dir, split="cgi")
    with pytest.raises(ValueError, match="topics must be one of"):
        load_reuters21578(reuters_dir, topics="r10")
    bad = _write_reuters(tmp_path / "bad", {"reut2-005.sgm": '<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN">x</REUTERS>'})
    with pytest.raises(ValueError, match="reut2-005.sgm: a <REUTERS> element has no NEWID"):
        load_reuters21578(bad)
    with pytest.raises(OSError, match="pass a path ending in .tar.gz"):
        load_reuters21578(tmp_path / "folder", download=True)


def test_reuters_download_uses_fetch(tmp_path, monkeypatch, reuters_dir):
    calls = []

    def fake_fetch(url, path, sha256):
        calls.append((url, path, sha256))
        path.parent.mkdir(parents=True)
        _write_tar(path, {f.name: f.read_bytes() for f in reuters_dir.iterdir()})

    monkeypatch.setattr(doc_mod, "fetch", fake_fetch)
    b = load_reuters21578(data_home=tmp_path / "home", download=True)
    assert calls == [("https://kdd.ics.uci.edu/databases/reuters21578/reuters21578.tar.gz",
                      tmp_path / "home" / "reuters21578.tar.gz", None)]
    np.testing.assert_array_equal(b.newids, [1, 2, 8, 11, 13])


# ---------------------------------------------------------------------------
# .mat files
# ---------------------------------------------------------------------------

XTR = np.array([[0.5, 0, 0, 1], [0, 0.25, 0, 0], [0, 0, 0, 0]])
XTE = np.array([[0, 0, 2, 0], [1, 1, 0, 0]])
ONEHOT_TR = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]])
ONEHOT_TE = np.array([[0, 0, 1], [0, 1, 0]])


def _save(path, **mats):
    scipy.io.savemat(path, mats)
    return path


def test_mat_dense_float32_onehot(tmp_path):
    p = _save(tmp_path / "d.mat", train=XTR.astype(np.float32), test=XTE.astype(np.float32),
              gnd_train=ONEHOT_TR, gnd_test=ONEHOT_TE.astype(np.float64))
    b = load_hashing_mat(p)
    assert sorted(b) == ["X_test", "X_train", "n_classes", "path", "y_test", "y_train"]
    assert sp.isspmatrix_csr(b.X_train) and b.X_train.dtype == np.float32
    assert b.X_test.dtype == np.float32 and b.X_test.shape == (2, 4)
    np.testing.assert_array_equal(b.X_train.toarray(), XTR)
    assert b.X_train.nnz == 3
    np.testing.assert_array_equal(b.X_test.toarray(), XTE)
    np.testing.assert_array_equal(b.y_train, [1, 0, 2])
    np.testing.assert_array_equal(b.y_test, [2, 1])
    assert b.y_train.dtype == np.int64 and b.n_classes == 3 and b.path == str(p)


def test_mat_sparse_multilabel_with_cv(tmp_path):
    gtr = sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=np.float64))
    p = _save(tmp_path / "s.mat", train=sp.csr_matrix(XTR), test=sp.csc_matrix(XTE), cv=sp.csr_matrix(XTE[:1]),
              gnd_train=gtr, gnd_test=ONEHOT_TE, gnd_cv=np.array([[0, 1, 1]]))
    b = load_hashing_mat(p)
    assert b.X_train.dtype == np.float64 and sp.isspmatrix_csr(b.X_test)
    np.testing.assert_array_equal(b.X_val.toarray(), XTE[:1])
    for y in (b.y_train, b.y_test, b.y_val):  # one multi-label matrix: all stay matrices
        assert sp.isspmatrix_csr(y) and y.dtype == np.int8
    assert _dense(b.y_train) == [[1, 1, 0], [1, 0, 0], [0, 0, 0]]
    assert _dense(b.y_test) == ONEHOT_TE.tolist()
    assert _dense(b.y_val) == [[0, 1, 1]]
    assert b.n_classes == 3


def test_mat_class_id_vectors(tmp_path):
    p = _save(tmp_path / "v.mat", train=XTR.astype(np.int32), test=XTE, gnd_train=np.array([2, 0, 1]),
              gnd_test=np.array([[1], [2]]), cv=XTE, gnd_cv=np.array([[0, 0, 1], [1, 0, 0]]))
    b = load_hashing_mat(p)
    assert b.X_train.dtype == np.float64  # integer matrices become float64
    np.testing.assert_array_equal(b.y_train, [2, 0, 1])
    np.testing.assert_array_equal(b.y_test, [1, 2])
    np.testing.assert_array_equal(b.y_val, [2, 0])  # one-hot matrix mixed with ids: ids
    assert b.y_test.dtype == np.int64 and b.y_val.dtype == np.int64 and b.y_train.ndim == 1
    assert b.n_classes == 3
    p = _save(tmp_path / "w.mat", train=XTR, test=XTE, gnd_train=np.array([3, 0, 1]), gnd_test=np.array([1, 2]))
    b = load_hashing_mat(p)
    assert b.n_classes == 4 and "X_val" not in b


def test_mat_errors(tmp_path):
    base = dict(train=XTR, test=XTE, gnd_train=ONEHOT_TR, gnd_test=ONEHOT_TE)

    def err(exc, match, **changes):
        mats = {k: v for k, v in {**base, **changes}.items() if v is not None}
        with pytest.raises(exc, match=match):
            load_hashing_mat(_save(tmp_path / "e.mat", **mats))

    err(ValueError, r"variable 'gnd_test' not found \(variables: \['gnd_train', 'test', 'train'\]\)", gnd_test=None)
    err(ValueError, "variable 'train' not found", train=None)
    err(ValueError, "variable 'gnd_cv' not found", cv=XTE)
    err(ValueError, "variable 'cv' not found", gnd_cv=ONEHOT_TE)
    err(ValueError, "variable 'gnd_train' has 2 rows but 'train' has 3", gnd_train=ONEHOT_TR[:2])
    err(ValueError, "variable 'gnd_test' has 3 rows but 'test' has 2", gnd_test=np.array([0, 1, 2]))
    err(ValueError, "variable 'test' has 3 columns but 'train' has 4", test=XTE[:, :3])
    err(ValueError, "label matrix 'gnd_test' has 2 columns but 'gnd_train' has 3", gnd_test=ONEHOT_TE[:, 1:])
    err(ValueError, "label matrix 'gnd_train' must hold only 0 and 1", gnd_train=2 * ONEHOT_TR)
    err(ValueError, "class ids in 'gnd_test' must be non-negative integers", gnd_test=np.array([-1, 0]))
    err(ValueError, "class ids in 'gnd_test' go up to 5", gnd_test=np.array([5, 0]))
    err(ValueError, "'gnd_test' holds class ids but", gnd_train=np.array([[1, 1, 0], [1, 0, 0], [0, 0, 1]]),
        gnd_test=np.array([0, 1]))
    with pytest.raises(FileNotFoundError, match="missing.mat not found"):
        load_hashing_mat(tmp_path / "missing.mat")


# ---------------------------------------------------------------------------
# vectorize_documents
# ---------------------------------------------------------------------------

TRAIN_DOCS = ["The cat sat on the mat", "The dog ate the cat food", "A cat and a dog", "the of and"]
TEST_DOCS = ["cat cat zebra", "nothing known"]


def test_vectorize_counts():
    Xtr, Xte, vocab = vectorize_documents(TRAIN_DOCS, TEST_DOCS)
    assert vocab == ["ate", "cat", "dog", "food", "mat", "sat"]
    assert sp.isspmatrix_csr(Xtr) and Xtr.dtype == np.float32 and Xte.dtype == np.float32
    assert Xtr.toarray().tolist() == [[0, 1, 0, 0, 1, 1], [1, 1, 1, 1, 0, 0], [0, 1, 1, 0, 0, 0], [0] * 6]
    assert Xte.toarray().tolist() == [[0, 2, 0, 0, 0, 0], [0] * 6]  # empty documents kept
    Xtr, Xte, vocab = vectorize_documents(TRAIN_DOCS, max_features=2, stop_words=None)
    assert Xte is None and vocab == ["cat", "the"] and Xtr.shape == (4, 2)
    _, _, vocab = vectorize_documents(TRAIN_DOCS, min_df=2)
    assert vocab == ["cat", "dog"]


def test_vectorize_tfidf_and_errors():
    Xtr, Xte, vocab = vectorize_documents(TRAIN_DOCS, TEST_DOCS, kind="tfidf")
    assert Xtr.dtype == np.float32 and Xte.dtype == np.float32
    np.testing.assert_allclose(np.sqrt(Xtr.multiply(Xtr).sum(axis=1)).A1, [1, 1, 1, 0], rtol=1e-6)
    np.testing.assert_allclose(Xte.toarray()[0], np.eye(6)[1], rtol=1e-6)
    with pytest.raises(ValueError, match="kind must be one of"):
        vectorize_documents(TRAIN_DOCS, kind="binary")
    with pytest.raises(TypeError, match="train_texts must be a list"):
        vectorize_documents("one string")
    with pytest.raises(TypeError, match="test_texts must be a list"):
        vectorize_documents(TRAIN_DOCS, "one string")


def _imports(path):
    """(module-level, function-level) modules imported by a source file: what importing
    it runs (statements under if / try / with included), and what its functions import."""
    top, inner = set(), set()

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            names = set()
            if isinstance(child, ast.Import):
                names = {a.name for a in child.names}
            elif isinstance(child, ast.ImportFrom) and child.module:
                names = {child.module} | {f"{child.module}.{a.name}" for a in child.names}
            (inner if in_function else top).update(names)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(Path(path).read_text()), False)
    return top, inner


# the document loaders and the modules they use: which heavy module each imports lazily
_LAZY = {"_documents": (), "_hashing_mat": ("scipy.io",), "_bag_of_words": ("sklearn.feature_extraction",)}


def test_heavy_imports_are_lazy():
    # module-level imports only (a subprocess "import similearn" check would take seconds)
    heavy = ("sklearn.feature_extraction", "scipy.io")
    top, _ = _imports(doc_mod.__file__)
    assert "sklearn.utils" in top
    for name, lazy in _LAZY.items():
        top, inner = _imports(Path(doc_mod.__file__).with_name(name + ".py"))
        assert not {m for m in top if m.startswith(heavy)}, name
        for m in lazy:  # still imported where it is used (else this test would check nothing)
            assert any(i.startswith(m) for i in inner), (name, m)
