"""``load(path, mmap=True)``: large members stored aligned, mapped, verified, never written.

The layout is in similearn._utils.archive.  Every public estimator (tests/estimator_cases.py)
is saved with the stored-member threshold lowered to 1 byte, so that all its non-empty arrays
are mapped, and must give the outputs of ``load(mmap=False)`` bit for bit.
"""
import gc
import hashlib
import io
import mmap
import os
import pickle
import struct
import warnings
import zipfile
import zlib

import numpy as np
import pytest
import scipy.sparse as sp
from estimator_cases import CASES, CASE_BY_NAME
from sklearn.base import BaseEstimator

import similearn
from similearn import load, save
from similearn._utils import archive
from similearn._utils.archive import ALIGN, mapping_of
from similearn._utils.serialization import _file_state

_SAVED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "saved_models")


@pytest.fixture
def map_everything(monkeypatch):
    """Store (and so map) every array of at least 1 byte."""
    monkeypatch.setattr(archive, "STORED_MIN_BYTES", 1)


def _fit(case, dtype="float64", n_threads=None):
    fit = case.data(np.random.default_rng(0), dtype, False)
    params = {"random_state": 0} if case.seeded else {}
    if n_threads is not None and case.threaded:
        params["n_threads"] = n_threads
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of the tiny fits
        return case.make(**params).fit(*fit.args, **fit.kwargs), fit


def _outputs(case, est, fit):
    return tuple(np.asarray(o) for o in case.outputs(est, fit))


def _assert_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _state_arrays(value, loc="est"):
    """(location, ndarray) of every array of a fitted state as a file holds it (nested
    containers, sparse matrices, estimators held by a parameter)."""
    if isinstance(value, BaseEstimator):
        params = value.get_params(deep=False)
        for k, v in _file_state(value).items():
            yield from _state_arrays(v, f"{loc}.{k}") if k not in params else ()
        for k, v in params.items():
            if isinstance(v, BaseEstimator):
                yield from _state_arrays(v, f"{loc}.{k}")
    elif isinstance(value, np.ndarray):
        yield loc, value
    elif sp.issparse(value):
        for k in ("data", "indices", "indptr"):
            yield f"{loc}.{k}", getattr(value, k)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _state_arrays(v, f"{loc}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _state_arrays(v, f"{loc}[{k!r}]")


def _data_offsets(path):
    """Member name -> (ZipInfo, offset of its array data in the file)."""
    out = {}
    raw = open(path, "rb").read()
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            h = info.header_offset
            n, m = struct.unpack_from("<HH", raw, h + 26)
            start = h + 30 + n + m
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)(f)
                out[info.filename] = info, start + f.tell()
    return out


def _fd_count(path):
    """Descriptors of this process open on ``path`` (also once it is unlinked: its link
    then reads "<path> (deleted)").  Counting only these keeps the count free of what
    other tests' objects open or close meanwhile (a garbage collection inside load)."""
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(target)
        except OSError:  # closed since the listing
            pass
    return count


def _maps(path):
    with open("/proc/self/maps") as f:
        return sum(os.path.realpath(path) in line for line in f)


# ----------------------------------------------------------------------------- layout


def test_large_members_are_stored_aligned_and_the_file_stays_a_npz(tmp_path):
    rng = np.random.default_rng(1)
    codes = similearn.pack_bits(rng.integers(0, 2, (20000, 64)))
    index = similearn.HammingIndex(n_bits=64, m=4).fit(codes)
    path = save(index, tmp_path / "index.npz")
    offsets = _data_offsets(path)
    stored = [name for name, (info, _) in offsets.items() if info.compress_type == zipfile.ZIP_STORED]
    assert stored and len(stored) < len(offsets)
    for name, (info, data) in offsets.items():
        with np.load(path) as z:
            big = z[name.removesuffix(".npy")].nbytes >= archive.STORED_MIN_BYTES
        assert (info.compress_type == zipfile.ZIP_STORED) == big, name
        if big:
            assert data % ALIGN == 0, (name, data)
    with np.load(path, allow_pickle=False) as z:  # numpy reads every member, stored or deflated
        assert np.array_equal(z["a0"], index.segments_[0]["codes"])
        assert zipfile.ZipFile(path).testzip() is None


@pytest.mark.parametrize("prefix", [0, 1, 63])
def test_alignment_holds_in_a_file_object_after_other_bytes(tmp_path, prefix, map_everything):
    """save into an open file at any position: the data offsets are aligned in the file."""
    est, fit = _fit(CASE_BY_NAME["FRML"])
    path = tmp_path / "model.npz"
    with open(path, "wb") as f:
        f.write(b"x" * prefix)
        save(est, f)
    for name, (info, data) in _data_offsets(path).items():
        if info.compress_type == zipfile.ZIP_STORED:
            assert data % ALIGN == 0, name
    with open(path, "rb") as f:
        f.seek(prefix)
        loaded = load(f, mmap=True)
    assert any(mapping_of(a) is not None for _, a in _state_arrays(loaded))
    _assert_bits(_outputs(CASE_BY_NAME["FRML"], est, fit), _outputs(CASE_BY_NAME["FRML"], loaded, fit))


# ----------------------------------------------------------------------------- every estimator


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_every_estimator_mapped_gives_the_same_bits(case, dtype, tmp_path, map_everything):
    est, fit = _fit(case, dtype)
    path = save(est, tmp_path / "model.npz")
    in_ram, mapped = load(path), load(path, mmap=True)
    assert type(mapped) is type(est)
    arrays = [(loc, a) for loc, a in _state_arrays(mapped) if a.nbytes and a.dtype != object]
    assert arrays
    for loc, a in arrays:
        assert mapping_of(a) is not None, f"{case.name}: {loc} ({a.dtype}, {a.shape}) is not mapped"
    for (loc, a), (_, b) in zip(_state_arrays(mapped), _state_arrays(in_ram), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), loc
    _assert_bits(_outputs(case, in_ram, fit), _outputs(case, mapped, fit))
    _assert_bits(_outputs(case, est, fit), _outputs(case, mapped, fit))


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("case", [c for c in CASES if c.threaded], ids=repr)
def test_mapped_outputs_do_not_depend_on_threads(case, n_threads, tmp_path, map_everything):
    est, fit = _fit(case, n_threads=1)
    mapped = load(save(est, tmp_path / "model.npz"), mmap=True)
    mapped.set_params(n_threads=n_threads)
    _assert_bits(_outputs(case, est, fit), _outputs(case, mapped, fit))


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_inference_reads_the_mapping_only(case, tmp_path, monkeypatch, map_everything):
    """Mapped read-only (PROT_READ, arrays not writeable), every estimator's outputs are the
    same: inference never writes into its arrays, so their pages stay shared with the page cache."""
    monkeypatch.setattr(archive, "_ACCESS", mmap.ACCESS_READ)
    est, fit = _fit(case)
    mapped = load(save(est, tmp_path / "model.npz"), mmap=True)
    arrays = [a for _, a in _state_arrays(mapped) if a.nbytes and a.dtype != object]
    assert arrays and not any(a.flags.writeable for a in arrays)
    _assert_bits(_outputs(case, est, fit), _outputs(case, mapped, fit))


# ----------------------------------------------------------------------------- writes copy


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_refitting_a_mapped_estimator_leaves_the_file_alone(case, tmp_path, map_everything):
    est, fit = _fit(case)
    path = save(est, tmp_path / "model.npz")
    before = path.read_bytes()
    in_ram, mapped = load(path), load(path, mmap=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        in_ram.fit(*fit.args, **fit.kwargs)
        mapped.fit(*fit.args, **fit.kwargs)
    _assert_bits(_outputs(case, in_ram, fit), _outputs(case, mapped, fit))
    assert path.read_bytes() == before


def test_hamming_index_add_copies_and_leaves_the_file_alone(tmp_path):
    rng = np.random.default_rng(2)
    codes = similearn.pack_bits(rng.integers(0, 2, (30000, 64)))
    more = similearn.pack_bits(rng.integers(0, 2, (500, 64)))
    path = save(similearn.HammingIndex(n_bits=64, m=4).fit(codes), tmp_path / "index.npz")
    before = path.read_bytes()
    in_ram, mapped = load(path), load(path, mmap=True)
    assert mapping_of(mapped.segments_[0]["codes"]) is not None
    in_ram.add(more)
    mapped.add(more)
    assert mapped.n_codes_ == 30500
    _assert_bits(in_ram.search(more[:20], 7), mapped.search(more[:20], 7))
    assert path.read_bytes() == before
    again = load(path, mmap=True)
    assert again.n_codes_ == 30000 and np.array_equal(again.codes_, codes)


def test_twotower_partial_fit_copies_and_leaves_the_file_alone(tmp_path, map_everything):
    case = CASE_BY_NAME["TwoTower"]
    est, fit = _fit(case)
    path = save(est, tmp_path / "model.npz")
    before = path.read_bytes()
    in_ram, mapped = load(path), load(path, mmap=True)
    for model in (in_ram, mapped):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.partial_fit(*fit.args, **fit.kwargs)
    _assert_bits(_outputs(case, in_ram, fit), _outputs(case, mapped, fit))
    assert path.read_bytes() == before


def test_writing_into_a_mapped_array_copies_the_page(tmp_path, map_everything):
    est, fit = _fit(CASE_BY_NAME["FRML"])
    path = save(est, tmp_path / "model.npz")
    before = path.read_bytes()
    mapped = load(path, mmap=True)
    a = mapped.components_
    assert mapping_of(a) is not None and a.flags.writeable
    a[...] = 7.0
    assert (mapped.components_ == 7.0).all()
    del a, mapped
    gc.collect()
    assert path.read_bytes() == before
    assert np.array_equal(load(path, mmap=True).components_, est.components_)


# ----------------------------------------------------------------------------- integrity


def _stored_member(path):
    """(ZipInfo, data offset) of the largest stored array member."""
    return max((v for name, v in _data_offsets(path).items()
                if v[0].compress_type == zipfile.ZIP_STORED and not name.startswith("__")),
               key=lambda v: v[0].file_size)


def _both_refuse(path):
    messages = []
    for flag in (False, True):
        with pytest.raises(ValueError) as info:
            load(path, mmap=flag)
        assert type(info.value) is ValueError
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    return messages[0]


@pytest.mark.parametrize("case", ["HammingIndex", "FRML", "TwoTower"])
def test_a_flipped_byte_in_a_mapped_member_is_refused_as_without_mmap(case, tmp_path, map_everything):
    est, _ = _fit(CASE_BY_NAME[case])
    path = save(est, tmp_path / "model.npz")
    info, data = _stored_member(path)
    b = bytearray(path.read_bytes())
    b[data + (info.file_size - (data - info.header_offset)) // 3] ^= 0x10
    path.write_bytes(bytes(b))
    message = _both_refuse(path)
    assert "CRC-32" in message and repr(info.filename.removesuffix(".npy")) in message


def _patch_crc(info, raw):
    """Set the CRC-32 of stored member ``info`` to that of its current bytes (local and central header)."""
    h = info.header_offset
    n, m = struct.unpack_from("<HH", raw, h + 26)
    start = h + 30 + n + m
    crc = zlib.crc32(raw[start:start + info.file_size])
    struct.pack_into("<L", raw, h + 14, crc)
    pos = raw.find(b"PK\x01\x02")  # the central directory's entries
    while pos >= 0:
        n = struct.unpack_from("<H", raw, pos + 28)[0]
        if raw[pos + 46:pos + 46 + n] == info.filename.encode():
            struct.pack_into("<L", raw, pos + 16, crc)
        pos = raw.find(b"PK\x01\x02", pos + 4)


@pytest.mark.parametrize("case", ["HammingIndex", "FRML"])
def test_a_changed_member_with_a_matching_crc_fails_its_sha256_as_without_mmap(case, tmp_path, map_everything):
    est, _ = _fit(CASE_BY_NAME[case])
    path = save(est, tmp_path / "model.npz")
    info, data = _stored_member(path)
    raw = bytearray(path.read_bytes())
    raw[data] ^= 0x01
    _patch_crc(info, raw)
    path.write_bytes(bytes(raw))
    message = _both_refuse(path)
    assert "SHA-256 differs" in message and repr(info.filename.removesuffix(".npy")) in message


def test_non_finite_mapped_state_is_refused_as_without_mmap(tmp_path, map_everything):
    est, _ = _fit(CASE_BY_NAME["FRML"])
    est.components_ = est.components_.copy()
    est.components_[1, 2] = np.nan
    message = _both_refuse(save(est, tmp_path / "model.npz"))
    assert "NaN or infinite" in message and "components_" in message


# ----------------------------------------------------------------------------- other files


@pytest.mark.parametrize("case", [c for c in CASES if c.saved_by_0_1_0], ids=repr)
def test_compressed_files_of_0_1_0_load_into_memory(case):
    path = os.path.join(_SAVED, f"{case.name}_v0.1.0.npz")
    _, fit = _fit(case)
    with warnings.catch_warnings(record=True) as w_ram:
        warnings.simplefilter("always")
        in_ram = load(path)
    with warnings.catch_warnings(record=True) as w_map:
        warnings.simplefilter("always")
        mapped = load(path, mmap=True)
    assert [str(w.message) for w in w_map] == [str(w.message) for w in w_ram]
    assert not any(mapping_of(a) is not None for _, a in _state_arrays(mapped))
    _assert_bits(_outputs(case, in_ram, fit), _outputs(case, mapped, fit))


def test_a_file_object_without_descriptor_is_read_into_memory(map_everything):
    est, fit = _fit(CASE_BY_NAME["FRML"])
    buf = io.BytesIO()
    save(est, buf)
    loaded = load(io.BytesIO(buf.getvalue()), mmap=True)
    assert not any(mapping_of(a) is not None for _, a in _state_arrays(loaded))
    _assert_bits(_outputs(CASE_BY_NAME["FRML"], est, fit), _outputs(CASE_BY_NAME["FRML"], loaded, fit))


class _Holder(BaseEstimator):
    """An estimator of user code holding arrays of every layout."""

    def __init__(self, tag=0):
        self.tag = tag


def test_every_array_layout_maps_bit_identical(tmp_path, map_everything):
    rng = np.random.default_rng(3)
    h = _Holder()
    h.fortran_ = np.asfortranarray(rng.standard_normal((300, 7)))
    h.big_endian_ = rng.standard_normal(100).astype(">f8")
    h.scalar_ = np.array(2.5, dtype=np.float32)
    h.empty_ = np.zeros((0, 4))
    h.one_row_ = rng.integers(0, 9, (1, 5)).astype(np.int16)
    h.flags_ = rng.random(999) > 0.5
    h.complex_ = rng.standard_normal(6) + 1j
    h.nested_ = {"w": [rng.standard_normal((4, 3)).astype(np.float32), None]}
    h.graph_ = sp.random(50, 40, density=0.1, format="csr", random_state=0)
    h.names_ = np.array(["a", "bc"], dtype=object)
    path = save(h, tmp_path / "holder.npz")
    in_ram, mapped = load(path, cls=_Holder), load(path, cls=_Holder, mmap=True)
    for (loc, a), (_, b) in zip(_state_arrays(mapped), _state_arrays(in_ram), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides, loc
        assert a.tolist() == b.tolist() if a.dtype == object else a.tobytes(order="A") == b.tobytes(order="A"), loc
    assert mapping_of(mapped.fortran_) is not None and mapped.fortran_.flags.f_contiguous
    assert mapping_of(mapped.big_endian_) is not None and mapping_of(mapped.graph_.data) is not None
    assert mapping_of(mapped.empty_) is None  # 0 bytes: nothing to map
    assert list(mapped.names_) == ["a", "bc"] and mapped.names_.dtype == object


def test_mmap_must_be_a_bool(tmp_path):
    est, _ = _fit(CASE_BY_NAME["FRML"])
    path = save(est, tmp_path / "model.npz")
    with pytest.raises(TypeError, match="mmap must be True or False"):
        load(path, mmap="r")
    assert type(similearn.FRML.load(path, mmap=True)) is similearn.FRML


# ----------------------------------------------------------------------------- lifetime


def test_mapping_outlives_load_and_the_file_and_is_released_with_the_estimator(tmp_path, map_everything):
    case = CASE_BY_NAME["FRML"]
    est, fit = _fit(case)
    path = save(est, tmp_path / "model.npz")
    gc.collect()
    fds, maps = _fd_count(path), _maps(path)
    mapped = load(path, mmap=True)
    assert _maps(path) > maps and _fd_count(path) == fds + 1  # the mapping and its one descriptor
    os.unlink(path)  # the mapping keeps the data
    _assert_bits(_outputs(case, est, fit), _outputs(case, mapped, fit))
    del mapped
    gc.collect()
    assert _fd_count(path) == fds


def test_many_loads_leak_no_descriptor_nor_mapping(tmp_path, map_everything):
    est, _ = _fit(CASE_BY_NAME["HammingIndex"])
    path = save(est, tmp_path / "index.npz")
    gc.collect()
    fds, maps = _fd_count(path), _maps(path)
    old = os.path.join(_SAVED, "FRML_v0.1.0.npz")
    old_fds = _fd_count(old)
    for _ in range(300):
        loaded = load(path, mmap=True)
        assert mapping_of(loaded.segments_[0]["codes"]) is not None
    del loaded
    gc.collect()
    assert _fd_count(path) == fds and _maps(path) == maps
    for _ in range(50):  # nothing mapped (a 0.1.0 file): the mapping is closed at once
        load(old, mmap=True)
    assert _fd_count(old) == old_fds


def test_verifying_drops_the_pages_it_read(tmp_path):
    """After load(mmap=True) the process holds (almost) none of a 32 MiB member: its
    pages were dropped once verified (mincore-free check: the mapping's Rss in smaps)."""
    rng = np.random.default_rng(4)
    codes = rng.integers(0, 2**63, (1 << 22, 1), dtype=np.uint64)
    index = similearn.HammingIndex(n_bits=64, m=4).fit(codes)
    path = save(index, tmp_path / "index.npz")
    del index
    mapped = load(path, mmap=True)
    real = os.path.realpath(path)
    rss_kib, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split()[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith(real)
            elif inside and line.startswith("Rss:"):
                rss_kib += int(line.split()[1])
    size_kib = os.path.getsize(path) // 1024
    assert rss_kib < size_kib // 8, (rss_kib, size_kib)
    assert np.array_equal(mapped.codes_, codes)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_mapped_estimator_pickles_its_values(case, tmp_path, map_everything):
    est, fit = _fit(case)
    mapped = load(save(est, tmp_path / "model.npz"), mmap=True)
    again = pickle.loads(pickle.dumps(mapped))
    assert not any(mapping_of(a) is not None for _, a in _state_arrays(again))
    _assert_bits(_outputs(case, est, fit), _outputs(case, again, fit))


def test_saving_a_mapped_index_over_its_own_file(tmp_path):
    """load(mmap=True), add, save to the same path: save replaces the file (a new inode), so
    the mapping still shows the old one and the new file holds the grown index."""
    rng = np.random.default_rng(5)
    codes = similearn.pack_bits(rng.integers(0, 2, (40000, 64)))
    more = similearn.pack_bits(rng.integers(0, 2, (300, 64)))
    path = save(similearn.HammingIndex(n_bits=64, m=4).fit(codes), tmp_path / "index.npz")
    mapped = load(path, mmap=True)
    expected = load(path).add(more)
    mapped.add(more)
    save(mapped, path)
    _assert_bits(expected.search(more[:30], 5), mapped.search(more[:30], 5))
    grown = load(path, mmap=True)
    assert grown.n_codes_ == 40300 and mapping_of(grown.segments_[0]["codes"]) is not None
    _assert_bits(expected.search(more[:30], 5), grown.search(more[:30], 5))


class _Stream:
    """A binary stream without tell/seek (a pipe, a socket): zipfile writes data descriptors."""

    def __init__(self):
        self.buf = io.BytesIO()

    def write(self, b):
        return self.buf.write(b)

    def flush(self):
        pass


def test_a_model_saved_to_an_unseekable_stream_maps(tmp_path, map_everything):
    case = CASE_BY_NAME["HammingIndex"]
    est, fit = _fit(case)
    stream = _Stream()
    save(est, stream)
    path = tmp_path / "model.npz"
    path.write_bytes(stream.buf.getvalue())
    for name, (info, data) in _data_offsets(path).items():
        assert info.compress_type != zipfile.ZIP_STORED or data % ALIGN == 0, name
    mapped = load(path, mmap=True)
    assert mapping_of(mapped.segments_[0]["codes"]) is not None
    _assert_bits(_outputs(case, est, fit), _outputs(case, mapped, fit))
