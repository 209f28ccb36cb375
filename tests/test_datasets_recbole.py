"""load_recbole_atomic: RecBole's atomic files (.inter / .user / .item) on fixtures written here."""
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from similearn.datasets import load_movielens, load_recbole_atomic

# the ML-100K fixture of test_datasets_interactions, in RecBole's conversion of it (ids as tokens, the
# title's words as a token_seq, the release year a token, the genres a token_seq)
INTER = ("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
         "1\t10\t4\t881250949\n2\t20\t3\t891717742\n1\t30\t5\t878887116\n3\t10\t1\t880606923\n")
USER = ("user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n"
        "1\t24\tM\ttechnician\t85711\n2\t53\tF\tother\t94043\n3\t17\tM\twriter\t32067\n")
ITEM = ("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
        "10\tToy Story\t1995\tAnimation Children's Comedy\n"
        "20\tCaf\u00e9\t1987\tDrama\n"
        "40\tOld Film\t1972\t\n"
        "30\tunknown\t\tunknown\n")
ML_100K_RAW = {
    "u.data": b"1\t10\t4\t881250949\n2\t20\t3\t891717742\n1\t30\t5\t878887116\n3\t10\t1\t880606923\n",
    "u.item": ("10|Toy Story (1995)|01-Jan-1995||http://x/10|" + "|".join("0" * 19) + "\n"
               "20|Caf\u00e9 (1987)|01-Jan-1987||http://x/20|" + "|".join("0" * 19) + "\n"
               "40|Old Film|01-Jan-1972||http://x/40|" + "|".join("0" * 19) + "\n"
               "30|unknown||||" + "|".join("0" * 19) + "\n").encode("latin-1"),
    "u.user": b"1|24|M|technician|85711\n2|53|F|other|94043\n3|17|M|writer|32067\n",
}


def _write(root, name, files):
    root.mkdir(parents=True, exist_ok=True)
    for ext, text in files.items():
        (root / f"{name}.{ext}").write_text(text, encoding="utf-8")
    return root


def _rows(X):
    X = sp.csr_matrix(X)
    return [X.indices[X.indptr[i]:X.indptr[i + 1]].tolist() for i in range(X.shape[0])]


def _named_rows(X, names):
    return [sorted(names[c] for c in r) for r in _rows(X)]


def test_recbole_ml100k_layout_matches_load_movielens(tmp_path):
    """The same interactions as load_movielens reads from the GroupLens files: same pairs, targets,
    timestamps, ids, same row order; features from the RecBole typed fields."""
    d = load_recbole_atomic(_write(tmp_path / "ml-100k", "ml-100k", {"inter": INTER, "user": USER, "item": ITEM}))
    m = load_movielens("100k", path=_write_raw(tmp_path / "raw"))
    for key in ("pairs", "targets", "timestamps", "user_ids", "item_ids"):
        np.testing.assert_array_equal(d[key], m[key])
        assert d[key].dtype == m[key].dtype, key
    assert d.pairs.dtype == np.int64 and d.targets.dtype == np.float64 and d.timestamps.dtype == np.int64
    assert d.variant == "ml-100k" and d.item_titles == ["Toy Story", "Caf\u00e9", "unknown", "Old Film"]
    for X in (d.left_features, d.right_features):
        assert sp.isspmatrix_csr(X) and X.dtype == np.float32 and X.has_sorted_indices
    assert _named_rows(d.left_features, d.left_feature_names)[0] == sorted(
        ["user=1", "age=24", "gender=M", "occupation=technician", "zip_code=85711"])
    right = _named_rows(d.right_features, d.right_feature_names)
    assert right[0] == sorted(["item=10", "movie_title=Toy", "movie_title=Story", "release_year=1995",
                               "class=Animation", "class=Children's", "class=Comedy"])
    assert right[2] == sorted(["item=30", "movie_title=unknown", "class=unknown"])  # an empty token: no feature
    assert right[3] == sorted(["item=40", "movie_title=Old", "movie_title=Film", "release_year=1972"])
    assert d.interaction_fields == {}


def _write_raw(root):
    root.mkdir(parents=True)
    for name, data in ML_100K_RAW.items():
        (root / name).write_bytes(data)
    return root


def test_recbole_paths_file_folder_subfolder_zip(tmp_path):
    files = {"inter": INTER, "user": USER, "item": ITEM}
    ref = load_recbole_atomic(_write(tmp_path / "a", "toy", files))
    nested = _write(tmp_path / "b" / "toy", "toy", files).parent  # RecBole's dataset/<name>/<name>.inter
    z = tmp_path / "toy.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for ext, text in files.items():
            zf.writestr(f"toy/toy.{ext}", text)
    for src in (tmp_path / "a" / "toy.inter", nested, z):
        d = load_recbole_atomic(src)
        np.testing.assert_array_equal(d.pairs, ref.pairs)
        assert (d.right_features != ref.right_features).nnz == 0 and d.right_feature_names == ref.right_feature_names
    _write(tmp_path / "a", "other", {"inter": INTER})
    with pytest.raises(ValueError, match="dataset="):
        load_recbole_atomic(tmp_path / "a")
    assert load_recbole_atomic(tmp_path / "a", dataset="other").right_features.shape == (3, 3)  # ids only
    with pytest.raises(FileNotFoundError):
        load_recbole_atomic(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="nope.inter"):
        load_recbole_atomic(tmp_path / "a", dataset="nope")


def test_recbole_types_string_ids_missing_values_and_extra_fields(tmp_path):
    inter = ("session:token\tuser_id:token\titem_id:token\tlabel:float\twhen:float\ttags:token_seq\n"
             "s1\tu_b\tbook\t1\t10.5\tx y\n"
             "s2\tu_a\t\"pen, blue\"\t0\t11\t\n"
             "s3\tu_c\tbook\t1\t\ty\n")
    user = "user_id:token\tscore:float\tvec:float_seq\nu_a\t2\t1 2 3\nu_b\t\t0.5\n"
    item = "item_id:token\tname:token\nbook\tA book\nink\tInk\n\"pen, blue\"\tPen\n"
    d = load_recbole_atomic(_write(tmp_path, "shop", {"inter": inter, "user": user, "item": item}),
                            rating_field="label", time_field="when")
    assert d.user_ids.dtype == object and d.user_ids.tolist() == ["u_a", "u_b", "u_c"]
    assert d.item_ids.tolist() == ["book", "ink", "pen, blue"]  # ink: in .item only, still a row
    np.testing.assert_array_equal(d.pairs, [[1, 0], [0, 2], [2, 0]])
    np.testing.assert_array_equal(d.targets, [1, 0, 1])
    assert d.timestamps.dtype == np.float64 and np.isnan(d.timestamps[2]) and d.timestamps[0] == 10.5
    assert d.interaction_fields == {"session": ["s1", "s2", "s3"], "tags": [["x", "y"], [], ["y"]]}
    L = d.left_features.toarray()
    names = d.left_feature_names
    assert names == ["user=u_a", "user=u_b", "user=u_c", "score", "vec[0]", "vec[1]", "vec[2]"]
    # u_b's missing score gets the mean of the present ones (RecBole's fill); u_c has no .user row
    np.testing.assert_array_equal(L, [[1, 0, 0, 2, 1, 2, 3], [0, 1, 0, 2, 0.5, 0, 0], [0, 0, 1, 0, 0, 0, 0]])
    assert d.item_titles == ["A book", "Ink", "Pen"]
    only = load_recbole_atomic(tmp_path, rating_field="label", time_field="when", user_fields=["vec"],
                               item_fields=[])
    assert only.left_feature_names[3:] == ["vec[0]", "vec[1]", "vec[2]"] and only.right_features.shape == (3, 3)
    implicit = load_recbole_atomic(tmp_path)  # no 'rating' / 'timestamp' columns: implicit feedback
    np.testing.assert_array_equal(implicit.targets, np.ones(3))
    assert implicit.timestamps is None and set(implicit.interaction_fields) == {"session", "label", "when", "tags"}


@pytest.mark.parametrize("inter, message", [
    ("user_id\titem_id:token\n1\t2\n", "header column 1"),
    ("user_id:token\titem_id:number\n1\t2\n", "header column 2"),
    ("user_id:token\tuser_id:token\n1\t2\n", "appears twice"),
    ("user_id:token\titem_id:token\n1\t2\t3\n", "line 2: 3 fields"),
    ("user_id:token\titem_id:token\n", "no interactions"),
    ("", "empty"),
    ("uid:token\titem_id:token\n1\t2\n", "no column 'user_id'"),
    ("user_id:float\titem_id:token\n1\t2\n", "must have type token"),
    ("user_id:token\titem_id:token\trating:float\n1\t2\tfive\n", "'rating' \\(float\\) holds 'five'"),
    ("user_id:token\titem_id:token\trating:float\n1\t2\t\n", "'rating' is empty"),
    ("user_id:token\titem_id:token\trating:float\n1\t2\tinf\n", "infinite"),
    ("user_id:token\titem_id:token\trating:token\n1\t2\t3\n", "must have type float"),
    ("user_id:token\titem_id:token\n1\t\n", "'item_id' is empty"),
])
def test_recbole_errors_name_file_and_field(tmp_path, inter, message):
    _write(tmp_path, "bad", {"inter": inter})
    with pytest.raises(ValueError, match=message):
        load_recbole_atomic(tmp_path)


def test_recbole_side_table_errors(tmp_path):
    _write(tmp_path, "t", {"inter": INTER, "item": "item_id:token\tx:token\n10\ta\n10\tb\n"})
    with pytest.raises(ValueError, match="item id 10 appears more than once"):
        load_recbole_atomic(tmp_path)
    _write(tmp_path, "t", {"inter": INTER, "item": "item_id:token\tx:token\n10\ta\n"})
    with pytest.raises(ValueError, match="item_fields names 'y'"):
        load_recbole_atomic(tmp_path, item_fields=["y"])
    _write(tmp_path, "t", {"inter": INTER, "item": "item_id:token\tv:float_seq\n10\t1 z\n"})
    with pytest.raises(ValueError, match="float_seq"):
        load_recbole_atomic(tmp_path)
    (tmp_path / "t.item").unlink()
    (tmp_path / "t.inter").write_bytes("user_id:token\titem_id:token\n\xe9\t1\n".encode("latin-1"))
    with pytest.raises(ValueError, match="encoding="):
        load_recbole_atomic(tmp_path)
    d = load_recbole_atomic(tmp_path, encoding="latin-1")
    assert d.user_ids.tolist() == ["\xe9"]
