import gzip
import io
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

import similearn.datasets._edge_list as edge_list_mod
import similearn.datasets._movielens as movielens_mod
import similearn.datasets._numeric_table as inter
from similearn.datasets import load_edge_list, load_movielens, train_test_split_pairs
from similearn.datasets._movielens import MOVIELENS_URL

GENRES_100K = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
               "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
               "War", "Western"]
AGES = ["<18", "18-24", "25-34", "35-44", "45-49", "50-55", "56+"]


def _flags(*names):
    return "|".join("1" if g in names else "0" for g in GENRES_100K)


# ---------------------------------------------------------------------------
# Fixtures: the published formats, in miniature
# ---------------------------------------------------------------------------

TOY_FLAGS = _flags("Animation", "Children's", "Comedy")
ML_100K = {
    "u.data": b"1\t10\t4\t881250949\n2\t20\t3\t891717742\n1\t30\t5\t878887116\n3\t10\t1\t880606923\n",
    "u.item": (f"10|Toy Story (1995)|01-Jan-1995||http://x/10|{TOY_FLAGS}\n"
               f"20|Caf\u00e9 (1987)|01-Jan-1987||http://x/20|{_flags('Drama')}\n"
               f"40|Old Film|01-Jan-1972||http://x/40|{_flags()}\n"
               f"30|unknown||||{_flags('unknown')}\n").encode("latin-1"),
    "u.user": b"1|24|M|technician|85711\n2|53|F|other|94043\n3|17|M|writer|32067\n",
    "u.genre": ("".join(f"{g}|{k}\n" for k, g in enumerate(GENRES_100K)) + "\n").encode("latin-1"),
    "u.occupation": b"writer\ntechnician\nother\n",
}

ML_1M = {
    "ratings.dat": b"5::3::4::978300760\n5::1::5::978302109\n6::3::3::978301968\n",
    "movies.dat": ("1::Toy Story (1995)::Animation|Children's|Comedy\n"
                   "2::Jumanji (1995)::Adventure|Children's|Fantasy\n"
                   "3::Am\u00e9lie (2001)::Comedy|Romance\n").encode("latin-1"),
    "users.dat": b"5::M::25::20::55455\n6::F::1::10::55117\n",
}

ML_10M = {
    "ratings.dat": b"1::122::5::838985046\n1::185::4.5::838983525\n2::122::0.5::868245777\n",
    "movies.dat": ("122::Boomerang (1992)::Comedy|Romance\n"
                   "185::Net, The (1995)::Action|Crime|Thriller\n"
                   "293::L\u00e9on (1994)::Action|Drama|Sci-Fi|Thriller\n").encode("utf-8"),
}

ML_CSV = {
    "ratings.csv": b"userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n1,29,4.0,1112484676\n7,2,1.5,1094785740\n",
    "movies.csv": ("movieId,title,genres\n"
                   "2,Jumanji (1995),Adventure|Children|Fantasy\n"
                   '29,"City of Lost Children, The (Cit\u00e9 des enfants perdus, La) (1995)",'
                   "Adventure|Drama|Fantasy|Mystery|Sci-Fi\n"
                   "131262,Innocence (2014),(no genres listed)\n"
                   "131270,Bad Title,(no genres listed)\n"
                   '140000,"Babylon 5 (1994-1998)",Sci-Fi\n').encode("utf-8"),
}

TOP = {"100k": "ml-100k", "1m": "ml-1m", "10m": "ml-10M100K", "20m": "ml-20m", "latest": "ml-latest",
       "latest-small": "ml-latest-small"}
FILES = {"100k": ML_100K, "1m": ML_1M, "10m": ML_10M, "20m": ML_CSV, "latest": ML_CSV, "latest-small": ML_CSV}


def _write_dir(root, files):
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def _write_zip(path, files, prefix=""):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        if prefix:
            zf.writestr(prefix, b"")  # the folder entry, as archivers write it
        for name, data in files.items():
            zf.writestr(prefix + name, data)
        zf.writestr("__MACOSX/" + prefix + "._" + next(iter(files)), b"\x00junk")
    return path


def _dense(X):
    assert sp.issparse(X) and X.format == "csr" and X.dtype == np.float32
    return X.toarray()


def _rows(X):
    """Nonzero columns of each row (all values must be 1)."""
    X = sp.csr_matrix(X)
    assert np.all(X.data == 1)
    return [sorted(X.indices[X.indptr[i]:X.indptr[i + 1]].tolist()) for i in range(X.shape[0])]


def _same(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        if sp.issparse(a[key]):
            np.testing.assert_array_equal(a[key].toarray(), b[key].toarray())
        elif isinstance(a[key], np.ndarray):
            assert a[key].dtype == b[key].dtype
            np.testing.assert_array_equal(a[key], b[key])
        elif key != "path":
            assert a[key] == b[key], key


# ---------------------------------------------------------------------------
# MovieLens: each format
# ---------------------------------------------------------------------------

def test_movielens_100k(tmp_path):
    b = load_movielens("100k", path=_write_dir(tmp_path / "d", ML_100K))
    np.testing.assert_array_equal(b.pairs, [[0, 0], [1, 1], [0, 2], [2, 0]])
    assert b.pairs.dtype == np.int64 and b.pairs.shape == (4, 2)
    np.testing.assert_array_equal(b.targets, [4.0, 3.0, 5.0, 1.0])
    assert b.targets.dtype == np.float64
    np.testing.assert_array_equal(b.timestamps, [881250949, 891717742, 878887116, 880606923])
    assert b.timestamps.dtype == np.int64
    np.testing.assert_array_equal(b.user_ids, [1, 2, 3])
    np.testing.assert_array_equal(b.item_ids, [10, 20, 30, 40])  # sorted, unrated 40 kept
    assert b.user_ids.dtype == np.int64 and b.item_ids.dtype == np.int64
    assert b.item_titles == ["Toy Story (1995)", "Caf\u00e9 (1987)", "unknown", "Old Film"]
    assert b.left_feature_names == (["user=1", "user=2", "user=3", "gender=F", "gender=M"]
                                    + [f"age={a}" for a in AGES]
                                    + ["occupation=writer", "occupation=technician", "occupation=other"])
    assert b.left_features.shape == (3, 15)
    # user 1: 24, M, technician; user 2: 53, F, other; user 3: 17, M, writer
    assert _rows(b.left_features) == [[0, 4, 6, 13], [1, 3, 10, 14], [2, 4, 5, 12]]
    assert b.right_feature_names == (["item=10", "item=20", "item=30", "item=40"]
                                     + [f"genre={g}" for g in GENRES_100K]
                                     + ["decade=1970", "decade=1980", "decade=1990"])
    assert b.right_features.shape == (4, 26)
    # 40 has no year in its title: the decade comes from its release date;
    # 30 has neither: no decade feature
    assert _rows(b.right_features) == [[0, 7, 8, 9, 25], [1, 12, 24], [2, 4], [3, 23]]
    _dense(b.left_features), _dense(b.right_features)
    assert b.variant == "100k" and "MovieLens 100K" in b.DESCR and "4 ratings" in b.DESCR


def test_movielens_100k_without_optional_files(tmp_path):
    files = {k: v for k, v in ML_100K.items() if k not in ("u.genre", "u.occupation")}
    b = load_movielens("100k", path=_write_dir(tmp_path / "d", files))
    # built-in genre list; occupations: the ones seen, sorted
    assert b.right_feature_names[4:23] == [f"genre={g}" for g in GENRES_100K]
    assert b.left_feature_names[12:] == ["occupation=other", "occupation=technician", "occupation=writer"]
    assert _rows(b.left_features) == [[0, 4, 6, 13], [1, 3, 10, 12], [2, 4, 5, 14]]


def test_movielens_1m(tmp_path):
    b = load_movielens("1m", path=_write_dir(tmp_path / "d", ML_1M))
    np.testing.assert_array_equal(b.pairs, [[0, 2], [0, 0], [1, 2]])
    np.testing.assert_array_equal(b.targets, [4.0, 5.0, 3.0])
    np.testing.assert_array_equal(b.timestamps, [978300760, 978302109, 978301968])
    np.testing.assert_array_equal(b.user_ids, [5, 6])
    np.testing.assert_array_equal(b.item_ids, [1, 2, 3])
    assert b.item_titles == ["Toy Story (1995)", "Jumanji (1995)", "Am\u00e9lie (2001)"]  # latin-1
    names = b.left_feature_names
    assert len(names) == 2 + 2 + 7 + 21 == b.left_features.shape[1]
    assert names[:4] == ["user=5", "user=6", "gender=F", "gender=M"]
    assert names[4:11] == [f"age={a}" for a in AGES]
    assert names[11] == "occupation=other" and names[21] == "occupation=K-12 student"
    assert names[31] == "occupation=writer"
    # user 5: M, 25 -> 25-34, 20 = writer; user 6: F, 1 -> under 18, 10 = K-12 student
    assert _rows(b.left_features) == [[0, 3, 6, 31], [1, 2, 4, 21]]
    assert b.right_feature_names == ["item=1", "item=2", "item=3", "genre=Adventure", "genre=Animation",
                                     "genre=Children's", "genre=Comedy", "genre=Fantasy", "genre=Romance",
                                     "decade=1990", "decade=2000"]
    assert _rows(b.right_features) == [[0, 4, 5, 6, 9], [1, 3, 5, 7, 9], [2, 6, 8, 10]]


def test_movielens_10m_half_stars(tmp_path):
    b = load_movielens("10m", path=_write_dir(tmp_path / "d", ML_10M))
    np.testing.assert_array_equal(b.pairs, [[0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(b.targets, [5.0, 4.5, 0.5])
    np.testing.assert_array_equal(b.user_ids, [1, 2])
    np.testing.assert_array_equal(b.item_ids, [122, 185, 293])
    assert b.item_titles == ["Boomerang (1992)", "Net, The (1995)", "L\u00e9on (1994)"]  # utf-8
    assert b.left_feature_names == ["user=1", "user=2"]  # no users file: ids only
    np.testing.assert_array_equal(_dense(b.left_features), np.eye(2))
    assert b.right_feature_names == ["item=122", "item=185", "item=293", "genre=Action", "genre=Comedy",
                                     "genre=Crime", "genre=Drama", "genre=Romance", "genre=Sci-Fi",
                                     "genre=Thriller", "decade=1990"]
    assert _rows(b.right_features) == [[0, 4, 7, 10], [1, 3, 5, 9, 10], [2, 3, 6, 8, 9, 10]]


@pytest.mark.parametrize("variant", ["20m", "latest", "latest-small"])
def test_movielens_csv(tmp_path, variant):
    b = load_movielens(variant, path=_write_dir(tmp_path / "d", ML_CSV))
    np.testing.assert_array_equal(b.pairs, [[0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(b.targets, [3.5, 4.0, 1.5])
    np.testing.assert_array_equal(b.timestamps, [1112486027, 1112484676, 1094785740])
    np.testing.assert_array_equal(b.user_ids, [1, 7])
    np.testing.assert_array_equal(b.item_ids, [2, 29, 131262, 131270, 140000])
    assert b.item_titles[1] == "City of Lost Children, The (Cit\u00e9 des enfants perdus, La) (1995)"
    assert b.item_titles[4] == "Babylon 5 (1994-1998)"
    assert b.left_feature_names == ["user=1", "user=7"]
    assert b.right_feature_names == ["item=2", "item=29", "item=131262", "item=131270", "item=140000",
                                     "genre=Adventure", "genre=Children", "genre=Drama", "genre=Fantasy",
                                     "genre=Mystery", "genre=Sci-Fi", "decade=1990", "decade=2010"]
    # "(no genres listed)" is no genre; "Bad Title" has no year
    assert _rows(b.right_features) == [[0, 5, 6, 8, 11], [1, 5, 7, 8, 9, 10, 11], [2, 12], [3], [4, 10, 11]]
    assert b.variant == variant


@pytest.mark.parametrize("variant", list(TOP))
def test_movielens_zip_and_folders_agree(tmp_path, variant):
    files = FILES[variant]
    flat = load_movielens(variant, path=_write_dir(tmp_path / "flat", files))
    nested = load_movielens(variant, path=_write_dir(tmp_path / "parent" / TOP[variant], files).parent)
    in_zip = load_movielens(variant, path=_write_zip(tmp_path / "a.zip", files, TOP[variant] + "/"))
    bare_zip = load_movielens(variant, path=_write_zip(tmp_path / "b.zip", files))
    for other in (nested, in_zip, bare_zip):
        _same(flat, other)
    assert in_zip.path == str(tmp_path / "a.zip")


def test_movielens_default_path_download_and_extracted(tmp_path, monkeypatch):
    home = tmp_path / "home"
    with pytest.raises(FileNotFoundError, match=r"download=True.*ml-1m\.zip") as err:
        load_movielens("1m", data_home=home)
    assert MOVIELENS_URL + "ml-1m.zip" in str(err.value)

    calls = []

    def fake_fetch(url, path, sha256=None):
        calls.append((url, path, sha256))
        path.parent.mkdir(parents=True, exist_ok=True)
        return _write_zip(path, ML_1M, "ml-1m/")

    monkeypatch.setattr(movielens_mod, "fetch", fake_fetch)
    b = load_movielens("1m", data_home=home, download=True)
    assert calls == [(MOVIELENS_URL + "ml-1m.zip", home / "ml-1m.zip", None)]
    assert b.path == str(home / "ml-1m.zip")
    np.testing.assert_array_equal(b.pairs, [[0, 2], [0, 0], [1, 2]])
    load_movielens("1m", data_home=home, download=True)
    assert len(calls) == 1  # present now: not fetched again

    # an extracted folder next to where the archive would be is used
    _write_dir(home / "ml-10M100K", ML_10M)
    b10 = load_movielens("10m", data_home=home)
    assert b10.path == str(home / "ml-10M100K")
    np.testing.assert_array_equal(b10.targets, [5.0, 4.5, 0.5])

    with pytest.raises(OSError, match=r"\.zip"):
        load_movielens("100k", path=tmp_path / "nope", download=True)


def test_movielens_errors(tmp_path):
    with pytest.raises(ValueError, match=r"variant must be one of \['100k', '1m', '10m', '20m', 'latest', "
                                         r"'latest-small'\], got '25m'"):
        load_movielens("25m", path=tmp_path)
    # a rating of a movie not in the movies file
    bad = dict(ML_1M, **{"ratings.dat": ML_1M["ratings.dat"] + b"6::99::2::978301969\n"})
    with pytest.raises(ValueError, match=r"movie id 99, which is not in .*movies\.dat"):
        load_movielens("1m", path=_write_dir(tmp_path / "m", bad))
    bad = dict(ML_CSV, **{"ratings.csv": ML_CSV["ratings.csv"] + b"7,3,1.0,1094785741\n"})
    with pytest.raises(ValueError, match=r"ratings\.csv refers to movie id 3, which is not in .*movies\.csv"):
        load_movielens("20m", path=_write_zip(tmp_path / "m.zip", bad, "ml-20m/"))
    bad = dict(ML_1M, **{"ratings.dat": ML_1M["ratings.dat"] + b"8::1::2::978301969\n"})
    with pytest.raises(ValueError, match=r"user id 8, which is not in .*users\.dat"):
        load_movielens("1m", path=_write_dir(tmp_path / "u", bad))
    # a missing file of the variant
    with pytest.raises(FileNotFoundError, match=r"movies\.dat"):
        load_movielens("1m", path=_write_dir(tmp_path / "f", {"ratings.dat": ML_1M["ratings.dat"]}))
    # malformed lines name the file and line
    bad = dict(ML_1M, **{"ratings.dat": b"5::3::4::978300760\n5::1::five::978302109\n"})
    with pytest.raises(ValueError, match=r"ratings\.dat, line 2: field 3 \('five'\) is not a finite number"):
        load_movielens("1m", path=_write_dir(tmp_path / "l", bad))
    bad = dict(ML_10M, **{"ratings.dat": b"1::122::5::838985046\n1::185::4.5\n"})
    with pytest.raises(ValueError, match=r"line 2: expected 4 fields separated by '::', got 3"):
        load_movielens("10m", path=_write_dir(tmp_path / "l2", bad))
    bad = dict(ML_CSV, **{"ratings.csv": b"1,2,3.5,1112486027\n"})
    with pytest.raises(ValueError, match=r"header line 'userId,movieId,rating,timestamp'"):
        load_movielens("latest-small", path=_write_dir(tmp_path / "h", bad))
    bad = dict(ML_CSV, **{"movies.csv": ML_CSV["movies.csv"] + b"2,Again (1990),Drama\n"})
    with pytest.raises(ValueError, match=r"movie id 2 appears more than once"):
        load_movielens("latest-small", path=_write_dir(tmp_path / "dup", bad))
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(OSError, match="zip archive"):
        load_movielens("1m", path=tmp_path / "junk.zip")


# ---------------------------------------------------------------------------
# Block parsing: pandas, NumPy and line-by-line paths
# ---------------------------------------------------------------------------

def _numbers(parser, data, kinds, sep, **kw):
    cols, _ = inter.read_numeric(io.BytesIO(data), kinds, sep, "f.txt", **kw)
    for c, k in zip(cols, kinds):
        assert c.dtype == (np.int64 if k == "i" else np.float64)
    return [c.tolist() for c in cols]


@pytest.fixture(params=["numpy", "pandas"])
def parser(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setattr(inter, "_import_pandas", lambda: None)
    else:
        pytest.importorskip("pandas")
    return request.param


def _no_fallback(*args):
    raise AssertionError("the line-by-line reader was used")


def test_read_numeric_fast_path(parser, monkeypatch):
    # the published formats are read by the block parser alone
    monkeypatch.setattr(inter, "_slow_chunk", _no_fallback)
    assert _numbers(parser, ML_100K["u.data"], "iifi", b"\t")[1] == [10, 20, 30, 10]
    assert _numbers(parser, ML_10M["ratings.dat"], "iifi", b"::")[2] == [5.0, 4.5, 0.5]
    cols, head = inter.read_numeric(io.BytesIO(ML_CSV["ratings.csv"]), "iifi", b",", "r.csv",
                                    header=True)
    assert head == b"userId,movieId,rating,timestamp" and cols[3].tolist() == [1112486027, 1112484676, 1094785740]
    edges = EDGES.replace(b"  \n", b"")
    assert _numbers(parser, edges, "ii", None, comment=b"#") == [[30, 10, 30, 20, 10], [10, 20, 10, 20, 30]]
    assert _numbers(parser, b"1  2\n\n\t3 4", "ii", None) == [[1, 3], [2, 4]]
    monkeypatch.setattr(inter, "_CHUNK", 5)
    assert _numbers(parser, b"1::2::3.5::10\r\n\r\n\n4::5::0.5::11\n", "iifi", b"::")[3] == [10, 11]


def test_read_numeric_values(parser, monkeypatch):
    data = b"1::2::3.5::10\r\n\n4::5::0.5::11\n6::7::5::12"
    assert _numbers(parser, data, "iifi", b"::") == [[1, 4, 6], [2, 5, 7], [3.5, 0.5, 5.0], [10, 11, 12]]
    # spaces around fields go through the line-by-line reader, with the same result
    assert _numbers(parser, b"1, 2,3.5 ,10\n", "iifi", b",") == [[1], [2], [3.5], [10]]
    # ids beyond 2**53 stay exact
    assert _numbers(parser, b"9007199254740993 1\n", "ii", None) == [[9007199254740993], [1]]
    assert _numbers(parser, b"# c\n  3 4\n#x 1\n5\t6\n", "ii", None, comment=b"#") == [[3, 5], [4, 6]]
    assert _numbers(parser, b"", "ii", None) == [[], []]
    # blocks cut in the middle of the data: same values, right line numbers
    monkeypatch.setattr(inter, "_CHUNK", 7)
    assert _numbers(parser, data, "iifi", b"::") == [[1, 4, 6], [2, 5, 7], [3.5, 0.5, 5.0], [10, 11, 12]]
    with pytest.raises(ValueError, match=r"f\.txt, line 4: field 2 \('x'\) is not an integer"):
        _numbers(parser, b"1 2\n3 4\n\n5 x\n7 8\n", "ii", None)


@pytest.mark.parametrize("data, message", [
    (b"1 2 3\n", r"line 1: expected 2 fields, got 3|line 1: expected 2 fields whitespace-separated, got 3"),
    (b"1 2\n3\n", r"line 2: expected 2 fields whitespace-separated, got 1"),
    (b"1 2\n3 2.5\n", r"line 2: field 2 \('2.5'\) is not an integer"),
    (b"1 2\n3 nan\n", r"line 2: field 2 \('nan'\) is not an integer"),
])
def test_read_numeric_errors(parser, data, message):
    with pytest.raises(ValueError, match=message):
        _numbers(parser, data, "ii", None)


def test_read_numeric_separator_errors(parser):
    with pytest.raises(ValueError, match=r"line 2: expected 4 fields separated by ',', got 5"):
        _numbers(parser, b"1,2,3,4\n1,2,3,4,\n", "iifi", b",")
    with pytest.raises(ValueError, match=r"line 1: field 3 \(''\) is not a finite number"):
        _numbers(parser, b"1,2,,4\n", "iifi", b",")
    with pytest.raises(ValueError, match=r"line 1: field 3 \('inf'\) is not a finite number"):
        _numbers(parser, b"1,2,inf,4\n", "iifi", b",")


def test_movielens_parsers_agree(tmp_path, monkeypatch):
    pytest.importorskip("pandas")
    paths = {v: _write_zip(tmp_path / f"{v}.zip", FILES[v], TOP[v] + "/") for v in ("100k", "1m", "10m", "20m")}
    with_pandas = {v: load_movielens(v, path=p) for v, p in paths.items()}
    monkeypatch.setattr(inter, "_import_pandas", lambda: None)
    for v, p in paths.items():
        _same(with_pandas[v], load_movielens(v, path=p))


def test_movielens_numpy_path(tmp_path, monkeypatch):
    monkeypatch.setattr(inter, "_import_pandas", lambda: None)
    monkeypatch.setattr(inter, "_CHUNK", 16)
    b = load_movielens("10m", path=_write_dir(tmp_path / "d", ML_10M))
    np.testing.assert_array_equal(b.pairs, [[0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(b.targets, [5.0, 4.5, 0.5])
    np.testing.assert_array_equal(b.timestamps, [838985046, 838983525, 868245777])


# ---------------------------------------------------------------------------
# Edge lists
# ---------------------------------------------------------------------------

EDGES = b"# Directed graph: test\n# FromNodeId\tToNodeId\n30\t10\n10\t20\n30\t10\n20\t20\n  \n10\t30\n"


def test_edge_list_directed(tmp_path):
    f = tmp_path / "g.txt"
    f.write_bytes(EDGES)
    b = load_edge_list(f)
    np.testing.assert_array_equal(b.node_ids, [10, 20, 30])
    assert b.node_ids.dtype == np.int64 and b.n_nodes == 3
    np.testing.assert_array_equal(b.pairs, [[2, 0], [0, 1], [1, 1], [0, 2]])  # self loop kept
    assert b.pairs.dtype == np.int64
    assert b.n_duplicates == 1 and "1 repeated edge" in b.DESCR
    np.testing.assert_array_equal(b.targets, np.ones(4))
    assert b.targets.dtype == np.float64
    np.testing.assert_array_equal(_dense(b.features), np.eye(3))
    assert b.feature_names == ["node=10", "node=20", "node=30"]


def test_edge_list_undirected_gz(tmp_path):
    f = tmp_path / "g.txt.gz"
    f.write_bytes(gzip.compress(EDGES + b"20\t10\n"))
    b = load_edge_list(f, directed=False)
    # first occurrences (30,10), (10,20), (20,20), each followed by its reverse
    np.testing.assert_array_equal(b.pairs, [[2, 0], [0, 2], [0, 1], [1, 0], [1, 1]])
    assert b.n_duplicates == 3  # 30 10 again, 10 30, 20 10
    np.testing.assert_array_equal(b.targets, np.ones(5))
    d = load_edge_list(f)
    np.testing.assert_array_equal(d.pairs, [[2, 0], [0, 1], [1, 1], [0, 2], [1, 0]])


def test_edge_list_no_relabel_and_delimiter(tmp_path):
    f = tmp_path / "g.txt"
    f.write_bytes(EDGES)
    b = load_edge_list(f, relabel=False)
    assert b.n_nodes == 31
    np.testing.assert_array_equal(b.node_ids, np.arange(31))
    np.testing.assert_array_equal(b.pairs, [[30, 10], [10, 20], [20, 20], [10, 30]])
    assert b.features.shape == (31, 31) and b.feature_names[30] == "node=30"
    c = tmp_path / "g.csv"
    c.write_bytes(b"%% header\n5,-3\n-3, 7\n")
    b = load_edge_list(c, delimiter=",", comments="%")
    np.testing.assert_array_equal(b.node_ids, [-3, 5, 7])
    np.testing.assert_array_equal(b.pairs, [[1, 0], [0, 2]])
    with pytest.raises(ValueError, match=r"relabel=False needs non-negative node ids, .* has id -3"):
        load_edge_list(c, delimiter=",", comments="%", relabel=False)


def test_edge_list_node_features(tmp_path):
    f = tmp_path / "g.txt"
    f.write_bytes(EDGES)
    nf = tmp_path / "feat.txt"
    nf.write_bytes(b"# node features\n10 red big\n30 blue\n40 red\n10 red\n20\n")
    expected_names = ["node=10", "node=20", "node=30", "node=40", "feature=big", "feature=blue", "feature=red"]
    expected_rows = [[0, 4, 6], [1], [2, 5], [3, 6]]
    for feats in (nf, str(nf), {10: ["red", "big"], 30: "blue", 40: ("red",), np.int64(20): []}):
        b = load_edge_list(f, node_features=feats)
        np.testing.assert_array_equal(b.node_ids, [10, 20, 30, 40])  # 40: only in the features
        assert b.feature_names == expected_names
        assert _rows(b.features) == expected_rows
        _dense(b.features)
        np.testing.assert_array_equal(b.pairs, [[2, 0], [0, 1], [1, 1], [0, 2]])
    b = load_edge_list(f, node_features=nf, relabel=False)
    assert b.n_nodes == 41 and b.features.shape == (41, 44)
    assert _rows(b.features)[10] == [10, 41, 43] and _rows(b.features)[40] == [40, 43]
    with pytest.raises(ValueError, match=r"feat2\.txt, line 2: expected 'node_id feature_name"):
        (tmp_path / "feat2.txt").write_bytes(b"1 a\nx b\n")
        load_edge_list(f, node_features=tmp_path / "feat2.txt")
    with pytest.raises(ValueError, match="node_features keys must be integer node ids"):
        load_edge_list(f, node_features={"a": ["b"]})
    with pytest.raises(ValueError, match="node_features must be a path"):
        load_edge_list(f, node_features=[1, 2])


@pytest.mark.parametrize("data, line", [
    (b"# c\n1 2\n3\n", 3),
    (b"1 2\n3 4 5\n", 2),
    (b"1 2\n# x\n\n3 b\n", 4),
    (b"1 2.5\n", 1),
])
def test_edge_list_malformed(tmp_path, data, line):
    f = tmp_path / "g.txt"
    f.write_bytes(data)
    with pytest.raises(ValueError, match=rf"g\.txt, line {line}:"):
        load_edge_list(f)


def test_edge_list_missing_and_download(tmp_path, monkeypatch):
    f = tmp_path / "sub" / "wiki-Vote.txt.gz"
    with pytest.raises(FileNotFoundError, match="download_url"):
        load_edge_list(f)
    url = "https://snap.stanford.edu/data/wiki-Vote.txt.gz"
    with pytest.raises(FileNotFoundError, match=r"download=True to fetch https://snap"):
        load_edge_list(f, download_url=url)
    with pytest.raises(ValueError, match="download=True needs download_url"):
        load_edge_list(f, download=True)
    calls = []

    def fake_fetch(u, path, sha256=None):
        calls.append((u, path, sha256))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(b"# FromNodeId ToNodeId\n3 7\n7 3\n"))
        return path

    monkeypatch.setattr(edge_list_mod, "fetch", fake_fetch)
    b = load_edge_list(f, download=True, download_url=url, sha256="a" * 64)
    assert calls == [(url, f, "a" * 64)]
    np.testing.assert_array_equal(b.pairs, [[0, 1], [1, 0]])
    np.testing.assert_array_equal(b.node_ids, [3, 7])
    with pytest.raises(ValueError, match="comments must be a non-empty str"):
        load_edge_list(f, comments="")


# ---------------------------------------------------------------------------
# Split
# ---------------------------------------------------------------------------

def test_split_pairs():
    pairs = np.stack([np.arange(20), np.arange(20) + 100], axis=1)
    targets = np.arange(20, dtype=np.float64)
    ptr, pte, ttr, tte = train_test_split_pairs(pairs, targets, test_size=0.25, random_state=0)
    assert ptr.shape == (15, 2) and pte.shape == (5, 2)
    assert ptr.dtype == np.int64
    assert set(ptr[:, 0]).isdisjoint(pte[:, 0])
    assert sorted(ptr[:, 0].tolist() + pte[:, 0].tolist()) == list(range(20))
    np.testing.assert_array_equal(ttr, ptr[:, 0])  # targets follow their pairs
    np.testing.assert_array_equal(tte, pte[:, 0])
    assert np.all(np.diff(ptr[:, 0]) > 0)  # original order kept
    again = train_test_split_pairs(pairs, targets, test_size=0.25, random_state=0)
    np.testing.assert_array_equal(again[1], pte)
    other = train_test_split_pairs(pairs, targets, test_size=0.25, random_state=1)
    assert not np.array_equal(other[1], pte)
    assert train_test_split_pairs(pairs, test_size=0.15)[1].shape == (3, 2)  # ceil(0.15 * 20)
    p_tr, p_te, t_tr, t_te = train_test_split_pairs(pairs.tolist(), test_size=4, random_state=3)
    assert p_tr.shape == (16, 2) and p_te.shape == (4, 2) and t_tr is None and t_te is None
    assert train_test_split_pairs(pairs)[1].shape == (2, 2)  # default 10 %


@pytest.mark.parametrize("kwargs, message", [
    ({"by": "user"}, r"by must be one of \['pair'\], got 'user'"),
    ({"test_size": 1.5}, "test_size must be"),
    ({"test_size": 0.0}, "test_size must be"),
    ({"test_size": 21}, "test_size must be"),
    ({"test_size": True}, "test_size must be"),
    ({"test_size": "0.1"}, "test_size must be"),
    ({"targets": np.zeros(3)}, r"targets must have shape \(20,\)"),
])
def test_split_pairs_errors(kwargs, message):
    pairs = np.zeros((20, 2), dtype=np.int64)
    with pytest.raises(ValueError, match=message):
        train_test_split_pairs(pairs, **kwargs)
    with pytest.raises(ValueError, match=r"pairs must have shape \(n, 2\)"):
        train_test_split_pairs(np.zeros((4, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="integer"):
        train_test_split_pairs(np.zeros((4, 2)))
