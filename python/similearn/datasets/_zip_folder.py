"""Files of a data set read from a folder or in place from a zip archive
(without extracting), found by file name.

Both sources have the same small interface: ``has(fname)``, ``label(fname)``
(the file's place, for error messages), ``open(fname)`` (a binary file) and
``close()``.  A folder holds the files directly or in the archive's top folder;
in a zip archive a file is found at any depth (the shallowest one wins,
``__MACOSX`` entries are ignored).
"""
from __future__ import annotations

import zipfile
from pathlib import PurePosixPath


class Folder:
    def __init__(self, root, top):
        self.root, self.top = root, top

    def _find(self, fname):
        for d in (self.root, self.root / self.top):
            if (d / fname).is_file():
                return d / fname
        return None

    def has(self, fname):
        return self._find(fname) is not None

    def label(self, fname):
        p = self._find(fname)
        return str(p if p is not None else self.root / fname)

    def open(self, fname):
        return open(self._find(fname), "rb")

    def close(self):
        pass


class Zip:
    def __init__(self, path):
        try:
            self.zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise OSError(f"{path} is neither a folder nor a readable zip archive ({exc})") from None
        self.path = path
        self.members = {}
        for info in self.zf.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.is_dir() or not parts or parts[0] == "__MACOSX":
                continue
            key = (len(parts), info.filename)
            if parts[-1] not in self.members or key < self.members[parts[-1]][0]:
                self.members[parts[-1]] = (key, info.filename)

    def has(self, fname):
        return fname in self.members

    def label(self, fname):
        member = self.members[fname][1] if fname in self.members else fname
        return f"{self.path}:{member}"

    def open(self, fname):
        return self.zf.open(self.members[fname][1])

    def close(self):
        self.zf.close()
