"""Model files refuse any change since save (file format version 2, similearn._utils.integrity).

Every public estimator (tests/estimator_cases.py) is fitted once, saved, and the
file is then changed in one way per test; load must refuse it with a ValueError
that names the member (or, for files that are not archives any more, the file).
The files are edited with zipfile and numpy directly, following the documented
format, so these tests also pin the format down.
"""
import hashlib
import io
import json
import re
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from estimator_cases import CASES
from sklearn.base import BaseEstimator

from similearn import load, save
from similearn.base import SimilearnVersionWarning

META = "__similearn_meta__"
META_SHA256 = "__similearn_meta_sha256__"


# ----------------------------------------------------------------------------- file surgery


def _npy(a):
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _sha256(a):
    """The documented checksum: SHA-256 of the elements' bytes in C order."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _members(blob):
    """Member name (without .npy) -> raw (decompressed) member bytes, in archive order."""
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        return {info.filename.removesuffix(".npy"): z.read(info) for info in z.infolist()}


def _archive(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name + ".npy", data)
    return buf.getvalue()


def _array(members, key):
    return np.load(io.BytesIO(members[key]), allow_pickle=False)


def _meta(members):
    return json.loads(_array(members, META).tobytes().decode("utf-8"))


def _set_meta(members, meta, seal=True):
    """Write the metadata; ``seal``: and its SHA-256 member to match."""
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    members[META] = _npy(blob)
    if seal:
        members[META_SHA256] = _npy(np.frombuffer(hashlib.sha256(blob.tobytes()).digest(), dtype=np.uint8))


def _replace(members, key, a, update=()):
    """Member ``key`` now holds ``a``; its metadata entry takes a's values for the fields in ``update``."""
    members[key] = _npy(a)
    if update:
        meta = _meta(members)
        new = {"sha256": _sha256(a), "dtype": a.dtype.str, "shape": list(a.shape)}
        meta["arrays"][key].update({field: new[field] for field in update})
        _set_meta(members, meta)


def _float_member(members, *, any_dtype=False):
    """The first non-empty floating array member; None if there is none (HammingIndex holds
    only integer codes and tables), or with ``any_dtype`` the first non-empty array member."""
    arrays = [(k, r) for k, r in _meta(members)["arrays"].items() if r["shape"] and np.prod(r["shape"]) > 0]
    key = next((k for k, r in arrays if np.dtype(r["dtype"]).kind == "f"), None)
    if key is None and any_dtype:
        key = arrays[0][0]
    return key


def _flip_byte(blob, member):
    """Flip a byte in the middle of ``member``'s compressed data."""
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        info = z.getinfo(member + ".npy")
    b = bytearray(blob)
    h = info.header_offset  # local header: 30 bytes, then the name and the extra field
    start = h + 30 + int.from_bytes(b[h + 26:h + 28], "little") + int.from_bytes(b[h + 28:h + 30], "little")
    b[start + info.compress_size // 2] ^= 0xFF
    return bytes(b)


def _as_version_1(members):
    """The file as similearn wrote it before the checksums."""
    meta = _meta(members)
    del meta["arrays"]
    meta["format_version"] = 1
    del members[META_SHA256]
    _set_meta(members, meta, seal=False)


# ----------------------------------------------------------------------------- fitted models


def _fit(case):
    fit = case.data(np.random.default_rng(0), "float64", False)
    return case.make().fit(*fit.args, **fit.kwargs), fit


@pytest.fixture(scope="module")
def saved():
    """case -> (estimator, Fit, bytes of its saved file); each estimator is fitted once."""
    cache = {}

    def get(case):
        if case.name not in cache:
            est, fit = _fit(case)
            buf = io.BytesIO()
            save(est, buf)
            cache[case.name] = est, fit, buf.getvalue()
        return cache[case.name]
    return get


def _refused(blob, tmp_path, *patterns, cls=None):
    path = tmp_path / "model.npz"
    path.write_bytes(blob)
    with pytest.raises(ValueError) as info:
        load(path, cls=cls)
    assert type(info.value) is ValueError  # no zipfile.BadZipFile, zlib.error, EOFError ... (nor subclasses)
    for p in patterns:
        assert re.search(p, str(info.value)), (p, str(info.value))
    return str(info.value)


def _assert_same_outputs(case, est, loaded, fit):
    for a, b in zip(case.outputs(est, fit), case.outputs(loaded, fit), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ----------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_round_trip_is_bit_identical_and_records_the_checksums(case, saved, tmp_path):
    est, fit, blob = saved(case)
    path = tmp_path / "model.npz"
    path.write_bytes(blob)
    _assert_same_outputs(case, est, load(path), fit)
    members = _members(blob)
    meta = _meta(members)
    assert meta["format_version"] == 2
    assert set(members) == {META, META_SHA256} | set(meta["arrays"])
    assert _array(members, META_SHA256).tobytes() == hashlib.sha256(_array(members, META).tobytes()).digest()
    for key, record in meta["arrays"].items():
        a = _array(members, key)
        assert record == {"sha256": _sha256(a), "dtype": a.dtype.str, "shape": list(a.shape)}


# ----------------------------------------------------------------------------- corruptions


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9, -1])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_truncated_file_is_refused_naming_the_file(case, cut, saved, tmp_path):
    blob = saved(case)[2]
    end = len(blob) - 1 if cut == -1 else int(len(blob) * cut)
    _refused(blob[:end], tmp_path, re.escape(repr(str(tmp_path / "model.npz"))),
             "not a similearn model file|corrupt")


def _flip_in_member(members, key, blob):
    return _flip_byte(blob, key), [f"member '{key}'"]


def _flip_in_metadata(members, key, blob):
    return _flip_byte(blob, META), [f"member '{META}'"]


def _nan_same_hash(members, key, blob):
    a = _array(members, key).copy()
    if a.dtype.kind == "f":
        a.flat[0] = np.nan
    else:  # integer state: any changed value
        a.flat[0] ^= 1
    _replace(members, key, a)
    return _archive(members), [f"member '{key}'", "SHA-256"]


def _nan_hash_updated(members, key, blob):
    a = _array(members, key).copy()
    a.flat[0] = np.nan
    _replace(members, key, a, update=("sha256",))
    return _archive(members), [f"member '{key}' \\(attribute ", "NaN or infinite"]


def _wrong_shape(members, key, blob):
    a = _array(members, key)
    _replace(members, key, np.concatenate([a, a[:1]]), update=("sha256",))
    return _archive(members), [f"member '{key}'", "has shape .* but the metadata records"]


def _wrong_shape_recorded(members, key, blob):
    """The metadata agrees with the new shape (one more column): the declared shapes must catch it (the
    message names the member, as the array refused or as the one that set the size it breaks)."""
    a = _array(members, key)
    _replace(members, key, np.concatenate([a, a[..., :1]], axis=-1), update=("sha256", "shape"))
    return _archive(members), [f"member '{key}' \\(attribute ", r"has shape .* but its dimension \d must be"]


def _wrong_dtype(members, key, blob):
    a = _array(members, key)
    _replace(members, key, a.astype(np.float32 if a.dtype == np.float64 else np.float64), update=("sha256",))
    return _archive(members), [f"member '{key}'", "has dtype .* but the metadata records"]


def _bytes_not_array(members, key, blob):
    members[key] = b"these bytes are not an .npy array" * 3
    return _archive(members), [f"member '{key}'", "not an array"]


def _missing_member(members, key, blob):
    del members[key]
    return _archive(members), [f"member '{key}' \\(attribute .*\\) is missing"]


def _missing_checksum(members, key, blob):
    del members[META_SHA256]
    return _archive(members), [f"member '{META_SHA256}'"]


def _extra_member(members, key, blob):
    members["a999"] = _npy(np.zeros(3))
    return _archive(members), ["member 'a999' is unexpected"]


def _edited_parameter(members, key, blob):
    meta = _meta(members)
    name, value = next((n, v) for n, v in meta["params"].items() if type(v) in (int, str))
    meta["params"][name] = value + 1 if isinstance(value, int) else value + "x"
    _set_meta(members, meta, seal=False)
    return _archive(members), [f"member '{META}'", "SHA-256"]


CORRUPTIONS = {f.__name__.lstrip("_"): f for f in (
    _flip_in_member, _flip_in_metadata, _nan_same_hash, _nan_hash_updated, _wrong_shape, _wrong_shape_recorded,
    _wrong_dtype, _bytes_not_array, _missing_member, _missing_checksum, _extra_member, _edited_parameter)}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_changed_file_is_refused_naming_the_member(case, corruption, saved, tmp_path):
    blob = saved(case)[2]
    members = _members(blob)
    if corruption == "nan_hash_updated" and _float_member(members) is None:
        pytest.skip(f"{case.name} holds no floating state: no NaN to refuse")
    key = _float_member(members, any_dtype=True)
    changed, patterns = CORRUPTIONS[corruption](members, key, blob)
    _refused(changed, tmp_path, "corrupt similearn model file", *patterns)


def test_messages_name_the_attribute(saved, tmp_path):
    """The member behind a nested attribute and a sparse matrix are named by their location."""
    case = next(c for c in CASES if c.name == "TwoTower")
    members = _members(saved(case)[2])
    meta = _meta(members)
    key = meta["state"]["params_"]["items"][0][1]["key"]  # params_["E_left"]
    _replace(members, key, np.full_like(_array(members, key), np.inf), update=("sha256",))
    _refused(_archive(members), tmp_path, re.escape(f"member '{key}' (attribute params_['E_left']) holds NaN"))
    members = _members(saved(case)[2])
    key = meta["state"]["_interactions"]["data"]
    del members[key]
    _refused(_archive(members), tmp_path, re.escape(f"member '{key}' (attribute _interactions.data) is missing"))


# ----------------------------------------------------------------------------- format version 1


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_version_1_file_loads_with_a_warning(case, saved, tmp_path):
    est, fit, blob = saved(case)
    members = _members(blob)
    _as_version_1(members)
    path = tmp_path / "v1.npz"
    path.write_bytes(_archive(members))
    with pytest.warns(SimilearnVersionWarning, match="format version 1.*integrity cannot be verified"):
        loaded = load(path)
    _assert_same_outputs(case, est, loaded, fit)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_version_1_file_still_has_its_invariants_checked(case, saved, tmp_path):
    members = _members(saved(case)[2])
    key = _float_member(members)
    if key is None:
        pytest.skip(f"{case.name} holds no floating state: no NaN to refuse")
    a = _array(members, key).copy()
    a.flat[-1] = np.nan
    _as_version_1(members)
    members[key] = _npy(a)
    with pytest.warns(SimilearnVersionWarning):
        _refused(_archive(members), tmp_path, f"member '{key}' \\(attribute ", "NaN or infinite")
    members = _members(saved(case)[2])
    _as_version_1(members)
    members["a999"] = _npy(np.zeros(3))
    with pytest.warns(SimilearnVersionWarning):
        _refused(_archive(members), tmp_path, "member 'a999' is unexpected: no attribute refers to it")


# ----------------------------------------------------------------------------- invariant declarations


class Layered(BaseEstimator):
    """A toy model with declared shapes exercising every kind of term."""

    _state_shapes = {
        "embed_": ("n_features_in_", ("width", "=w[0]")),  # width: a parameter
        "layers_.W[i]": ("=w[i]", "=w[i+1]"),
        "layers_.b[i]": ("=w[i+1]",),
        "out_": ("=w[-1]", "=out"),
        "bias_": ("=out",),
        "trace_": ("n_iter_+1",),
        "graph_": ("n_features_in_", "n_features_in_"),
        "counts_": ("sizes_.n",),
    }
    _save_nonfinite = ("losses_",)

    def __init__(self, width=3):
        self.width = width

    def fit(self, hidden=(4, 5)):
        rng = np.random.default_rng(0)
        w = (self.width, *hidden)
        self.n_features_in_ = 6
        self.embed_ = rng.random((6, self.width))
        self.layers_ = {"W": [rng.random((w[i], w[i + 1])) for i in range(len(hidden))],
                        "b": [rng.random(h) for h in hidden]}
        self.out_ = rng.random((w[-1], 2))
        self.bias_ = np.zeros(2)
        self.n_iter_ = 4
        self.trace_ = np.arange(5.0)
        self.graph_ = sp.random(6, 6, density=0.3, format="csr", random_state=0)
        self.sizes_ = {"n": 2}
        self.counts_ = np.array([1, 2])
        self.losses_ = np.array([1.0, np.nan, np.inf])
        return self


def _reload(est, tmp_path):
    return load(save(est, tmp_path / "toy.npz"), cls=Layered)


@pytest.mark.parametrize("hidden", [(4, 5), (7,), ()])
def test_declared_shapes_accept_a_consistent_model(hidden, tmp_path):
    est = Layered().fit(hidden)
    loaded = _reload(est, tmp_path)
    np.testing.assert_array_equal(loaded.losses_, est.losses_)  # declared non-finite: kept
    _reload(Layered(), tmp_path)  # unfitted: nothing to check


@pytest.mark.parametrize("change, message", [
    (lambda e: e.layers_["W"].__setitem__(1, np.ones((5, 5))),
     r"attribute layers_\['W'\]\[1\]\) has shape \(5, 5\), but its dimension 0 must be =w\[1\] \(set to 4 by "
     r"dimension 1 of member 'a\d+' \(attribute layers_\['W'\]\[0\]\)\) = 4"),
    (lambda e: e.layers_["b"].__setitem__(0, np.ones(3)), r"layers_\['b'\]\[0\].* dimension 0 must be =w\[1\] .* = 4"),
    (lambda e: setattr(e, "out_", np.ones((4, 2))), r"out_.* dimension 0 must be =w\[2\] .* = 5"),
    (lambda e: setattr(e, "embed_", np.ones((6, 4))), r"embed_.* dimension 1 must be width = 3"),
    (lambda e: setattr(e, "bias_", np.ones(3)), r"bias_.* dimension 0 must be =out"),
    (lambda e: setattr(e, "trace_", np.ones(4)), r"trace_.* dimension 0 must be n_iter_\+1 = 5"),
    (lambda e: setattr(e, "graph_", sp.csr_matrix((6, 5))), r"attribute graph_ has shape \(6, 5\), but its dim"),
    (lambda e: setattr(e, "counts_", np.ones(3)), r"counts_.* dimension 0 must be sizes_\['n'\] = 2"),
    (lambda e: setattr(e, "embed_", np.ones(6)), r"embed_.* has shape \(6,\), but it must have 2 dimension"),
    (lambda e: setattr(e, "bias_", [0.0, 0.0]), r"attribute bias_ must be an array, got list"),
    (lambda e: setattr(e, "sizes_", {}), r"member 'a\d+' \(attribute counts_\) takes the size of its dimension 0 "
                                          r"from attribute sizes_\['n'\], which is missing"),
    (lambda e: setattr(e, "sizes_", {"n": -2}), r"attribute sizes_\['n'\] must be a non-negative int, got -2"),
    (lambda e: setattr(e, "n_iter_", 4.0), r"attribute n_iter_ must be a non-negative int, got 4.0"),
    (lambda e: setattr(e, "n_features_in_", -6), r"attribute n_features_in_ must be a non-negative int"),
    (lambda e: setattr(e, "bias_", np.array([0.0, np.nan])), r"attribute bias_\) holds NaN or infinite values"),
    (lambda e: setattr(e, "extra_", [{"x": np.array([np.inf])}]),
     r"attribute extra_\[0\]\['x'\]\) holds NaN or infinite"),
    (lambda e: setattr(e, "graph_", sp.csr_matrix(np.array([[np.nan]]))), r"attribute graph_.data\) holds NaN"),
])
def test_declared_invariants_refuse_an_inconsistent_model(change, message, tmp_path):
    est = Layered().fit()
    change(est)
    _refused(save(est, io.BytesIO()).getvalue(), tmp_path, message, cls=Layered)


def test_malformed_declaration_is_a_type_error_naming_it(tmp_path, monkeypatch):
    est = Layered().fit()
    blob = save(est, io.BytesIO()).getvalue()
    path = tmp_path / "toy.npz"
    path.write_bytes(blob)
    monkeypatch.setattr(Layered, "_state_shapes", {"embed_": ("n features",)})
    with pytest.raises(TypeError, match=r"Layered._state_shapes\['embed_'\]: bad dimension term 'n features'"):
        load(path, cls=Layered)
