"""The ``.npz`` archive of a model file: writing it, and mapping its large members.

:mod:`similearn._utils.serialization` decides what a model file holds; this module
lays the members out in the ZIP archive and reads them back.

Layout (what :func:`write_npz` writes)
--------------------------------------
A ZIP archive that ``numpy.load`` reads like the output of ``numpy.savez``: one
``<key>.npy`` member per array, in the order given, each written by
``numpy.lib.format.write_array`` (ZIP64 local headers, as numpy writes them).

* A member of fewer than :data:`STORED_MIN_BYTES` bytes of array data is
  compressed (``ZIP_DEFLATED``), as ``numpy.savez_compressed`` does.
* A larger one is stored uncompressed (``ZIP_STORED``) with its array data
  64-byte aligned in the file: the local header's extra field carries a padding
  field (header ID ``0xD935``, the one Android's ``zipalign`` uses: a 2-byte
  alignment, 64, then zero bytes) sized so that the ``.npy`` member starts on a
  64-byte boundary, and the ``.npy`` header is itself a multiple of 64 bytes long
  (``numpy.lib.format.ARRAY_ALIGN``).  So the array's bytes lie in the file as
  they lie in memory, and can be mapped.

Why 64 KiB: below it, mapping saves at most 16 pages per member, less than the two
partly shared pages at a member's ends can cost, while deflate shrinks the small
members that are text-like (the JSON metadata) several fold; above it, the members
are the model's tables (codes, embeddings, weights), which deflate barely shrinks
(random-like bits: 8-10 % for 64-bit codes and float32 rows) at 15-25 MB/s to write
and 200-300 MB/s to read, against memory bandwidth for a stored member: saving 10M
codes took 34.7 s deflated, 1.85 s stored (bench/mmap_load.py, bench/README.md).

Mapping (what :class:`MappedMembers` reads)
-------------------------------------------
A stored member whose data is 64-byte aligned is mapped with ``mmap`` in
copy-on-write mode (``MAP_PRIVATE`` over a read-only file descriptor): the array
is a view of the mapping, its pages are read from the file (the page cache, shared
by every process that maps the file) when touched, and a write into it copies the
page it touches into the process's memory first, so the file is never written, and
estimators that change their arrays in place (``HammingIndex.add``, ``partial_fit``)
work as on arrays read into memory.  Every other member (deflated, as in files of
similearn 0.1.0, unaligned, or a file object without a file descriptor) is read
into memory as without mapping.

Before a member is handed out it is read once, in chunks: its ZIP CRC-32 is checked
(a mismatch raises exactly the error reading it without mapping raises), and the
SHA-256 of its data (C order) and, for floating dtypes, whether it is all finite,
are computed for the checks of :mod:`similearn._utils.integrity`; each chunk's pages
are dropped from the process (``MADV_DONTNEED``) once read, so verifying does not
leave the model resident.

One mapping covers the whole file; it holds one (duplicated) file descriptor, and
both are released when the last array viewing it is garbage collected.
"""
from __future__ import annotations

import hashlib
import mmap
import struct
import time
import zipfile
import zlib

import numpy as np
from numpy.lib import format as npy_format

from .integrity import ModelFileError

__all__ = ["STORED_MIN_BYTES", "ALIGN", "write_npz", "read_member", "MappedMembers", "mapping_of"]

#: Arrays of at least this many bytes are stored uncompressed and aligned (mappable).
STORED_MIN_BYTES = 1 << 16
#: Alignment of a stored member's array data in the file.
ALIGN = 64
_PAD_ID = 0xD935  # the extra field Android's zipalign pads with: <alignment: u16> then zeros
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # the 30 bytes of a ZIP local file header
_ACCESS = mmap.ACCESS_COPY  # copy-on-write (tests map read-only to show that inference writes nothing)
_CHUNK = 1 << 23  # bytes read per step when verifying a mapped member (a multiple of the page size)


# ----------------------------------------------------------------------------- writing


def _stored_entry(zf, name):
    """A ZipInfo for ``name``, stored, whose data will start ALIGN-aligned in the file."""
    zinfo = zipfile.ZipInfo(name, date_time=time.localtime(time.time())[:6])
    zinfo.compress_type = zipfile.ZIP_STORED
    zinfo.extra, zinfo.CRC, zinfo.compress_size = b"", 0, 0  # (zf.open sets the last two again)
    start = zf.start_dir + len(zinfo.FileHeader(True))  # where the data would start without padding
    pad = 6 + (-(start + 6)) % ALIGN
    zinfo.extra = struct.pack("<HHH", _PAD_ID, pad - 4, ALIGN) + bytes(pad - 6)
    return zinfo


def write_npz(file, arrays):
    """Write ``arrays`` (key -> ndarray) to ``file`` (a path or a binary file object) as an
    ``.npz`` archive, the layout of the module docstring."""
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for key, a in arrays.items():
            a = np.asanyarray(a)
            name = key + ".npy"
            target = _stored_entry(zf, name) if a.nbytes >= STORED_MIN_BYTES else name
            with zf.open(target, "w", force_zip64=True) as fid:
                npy_format.write_array(fid, a, allow_pickle=False)


# ----------------------------------------------------------------------------- reading


def read_member(npz, key, label):
    """Member ``key`` as numpy reads it: an ndarray, or bytes for a member that is not .npy."""
    try:
        return npz[key]
    except Exception as exc:  # zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError (.npy header) ...
        raise ModelFileError(f"{label} cannot be read ({type(exc).__name__}: {exc})") from None


class MemberReader:
    """Reads every member into memory (``load(..., mmap=False)``)."""

    def __init__(self, npz):
        self.npz = npz
        self.finite = set()  # id() of the arrays known to be finite (none: integrity checks them)

    def read(self, key, label):
        """(member ``key``, the hex SHA-256 of its canonical bytes or None when not computed)."""
        return read_member(self.npz, key, label), None

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MappedMembers(MemberReader):
    """Maps the stored, aligned members of the open archive ``npz``; reads the others
    (``load(..., mmap=True)``, the module docstring)."""

    def __init__(self, npz):
        super().__init__(npz)
        self.mm, self.done = None, {}
        try:
            fd = npz.zip.fp.fileno()
            self.mm = mmap.mmap(fd, 0, access=_ACCESS)
        except (AttributeError, OSError, ValueError):  # io.BytesIO and other objects without a descriptor
            self.mm = None

    def read(self, key, label):
        if key not in self.done:
            self.done[key] = self._read(key, label)
        return self.done[key]

    def close(self):
        """Drop the mapping now if no array views it (nothing was mapped)."""
        if self.mm is not None and not any(mapping_of(a) is self.mm for a, _ in self.done.values()):
            self.mm.close()
        self.mm, self.done = None, {}  # the arrays live on in the estimator only (not in a traceback)

    def _read(self, key, label):
        found = None if self.mm is None else self._locate(key)
        if found is None:
            return read_member(self.npz, key, label), None
        zinfo, start, data, dtype, shape, fortran = found
        crc, sha, finite = self._verify(start, data, start + zinfo.file_size, dtype, fortran)
        if crc != zinfo.CRC:  # the error reading the member raises (zipfile's "Bad CRC-32 ...")
            return read_member(self.npz, key, label), None
        count = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(self.mm, dtype=dtype, count=count, offset=data)
        a = a.reshape(shape, order="F" if fortran else "C")
        if finite:
            self.finite.add(id(a))
        return a, sha

    def _locate(self, key):
        """(ZipInfo, member start, data start, dtype, shape, fortran_order) of a mappable member,
        or None (read it as numpy does: not stored, not aligned, odd header, ...)."""
        try:
            zinfo = self.npz.zip.getinfo(key + ".npy")
        except KeyError:
            return None
        mm = self.mm
        if zinfo.compress_type != zipfile.ZIP_STORED or zinfo.flag_bits & 0x1 \
                or zinfo.compress_size != zinfo.file_size:  # deflated (0.1.0 files, small members), encrypted
            return None
        h = zinfo.header_offset
        if h + _LOCAL_HEADER.size > len(mm):
            return None
        fields = _LOCAL_HEADER.unpack_from(mm, h)
        if fields[0] != b"PK\x03\x04":
            return None
        name_at, start = h + _LOCAL_HEADER.size, h + _LOCAL_HEADER.size + fields[-2] + fields[-1]
        name = zinfo.orig_filename.encode("utf-8" if zinfo.flag_bits & 0x800 else "cp437", "replace")
        if mm[name_at:name_at + fields[-2]] != name:  # as zipfile checks it
            return None
        try:
            mm.seek(start)
            version = npy_format.read_magic(mm)
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(mm)
            elif version == (2, 0):
                shape, fortran, dtype = npy_format.read_array_header_2_0(mm)
            else:
                return None
        except (ValueError, OSError, EOFError):
            return None
        data = mm.tell()
        nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if dtype.hasobject or data % ALIGN or data - start + nbytes != zinfo.file_size \
                or start + zinfo.file_size > len(mm):
            return None
        return zinfo, start, data, dtype, shape, fortran

    def _verify(self, start, data, end, dtype, fortran):
        """One pass over the member's bytes [start, end) (its .npy header from ``start``, its
        array data from ``data``): (CRC-32 of all, hex SHA-256 of the data or None when not
        C-ordered, whether a floating array is all finite); each chunk's whole pages are
        dropped from the process once read (no other view of them exists yet)."""
        mm, page = self.mm, mmap.PAGESIZE
        crc = zlib.crc32(mm[start:data])
        sha = hashlib.sha256() if not fortran else None
        check = dtype.kind in "fc" and dtype.isnative
        finite = check
        lo_page, hi_page = -(-data // page) * page, end // page * page  # the pages only this member uses
        with memoryview(mm) as view:
            pos = data
            while pos < end:
                stop = min(end, (pos // _CHUNK + 1) * _CHUNK)
                chunk = view[pos:stop]
                crc = zlib.crc32(chunk, crc)
                if sha is not None:
                    sha.update(chunk)
                if finite:
                    finite = bool(np.isfinite(np.frombuffer(chunk, dtype=dtype)).all())
                chunk.release()
                a, b = max(lo_page, -(-pos // page) * page), min(hi_page, stop // page * page)
                if b > a and hasattr(mm, "madvise"):
                    mm.madvise(mmap.MADV_DONTNEED, a, b - a)
                pos = stop
        return crc, None if sha is None else sha.hexdigest(), finite and check


def mapping_of(a):
    """The ``mmap.mmap`` that ndarray ``a`` views, or None (follows ``.base`` and memoryviews)."""
    while a is not None:
        if isinstance(a, mmap.mmap):
            return a
        a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
    return None
