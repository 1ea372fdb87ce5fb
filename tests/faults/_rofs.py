"""A FUSE filesystem that can turn read-only while files on it are open for writing, as a disk
does when the kernel remounts it read-only after an error (which a test cannot undo).

`python _rofs.py SOURCE MOUNTPOINT SWITCH` mirrors the folder SOURCE at MOUNTPOINT (in the
foreground, until SIGTERM). While the file SWITCH exists, every change (open for writing,
create, write, truncate, fsync, unlink, rename, mkdir...) is answered with EROFS, also on files
opened before; once it is removed, everything works again.

Except SQLite's `-shm` files: SQLite shares its WAL index through a memory map of that file, and
on a disk turned read-only that memory stays shared by every process, whatever the disk says.
On FUSE it does not: when another process opens the file, the kernel drops the pages it cannot
write back, and every process then sees an old index (the latest commits vanish: a run's
finished steps ran again). So `-shm` files stay writable, as their memory does on a real disk.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import mfusepy as fuse

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_CREAT | os.O_APPEND


class Switchable(fuse.Operations):
    """Passthrough to `source`; read-only (but `-shm` files) while the file `switch` exists."""

    use_ns = True

    def __init__(self, source: str, switch: str) -> None:
        self.source = os.path.abspath(source)
        self.switch = os.path.abspath(switch)

    def _path(self, path: str) -> str:
        return os.path.join(self.source, path.lstrip("/"))

    def _check(self, path: str = "") -> None:
        """EROFS while read-only, unless `path` is a `-shm` file."""
        if os.path.exists(self.switch) and not path.endswith("-shm"):
            raise fuse.FuseOSError(errno.EROFS)

    # Reading.
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.lstat(self._path(path))
        names = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_dev")
        attrs: dict[str, Any] = {name: getattr(st, name) for name in names}
        for name in ("st_atime", "st_mtime", "st_ctime"):
            attrs[name] = getattr(st, name + "_ns")
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._path(path))]

    def access(self, path: str, amode: int) -> int:
        if amode & os.W_OK:
            self._check()
        if not os.access(self._path(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._path(path))
        names = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                 "f_flag", "f_frsize", "f_namemax")  # fmt: skip
        return {name: getattr(st, name) for name in names}

    def open(self, path: str, flags: int) -> int:
        if flags & _WRITE_FLAGS:
            self._check(path)
        return os.open(self._path(path), flags & ~os.O_CREAT)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    # Changing.
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        self._check(path)
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT, mode)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._check(path)
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self._check(path)
        if fh is None:
            os.truncate(self._path(path), length)
        else:
            os.ftruncate(fh, length)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._check(path)
        (os.fdatasync if datasync else os.fsync)(fh)
        return 0

    def unlink(self, path: str) -> int:
        self._check()
        os.unlink(self._path(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        self._check()
        os.rename(self._path(old), self._path(new))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._check()
        os.mkdir(self._path(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._check()
        os.rmdir(self._path(path))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._check()
        os.chmod(self._path(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._check()
        os.chown(self._path(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._check()
        os.utime(self._path(path), ns=times)
        return 0


if __name__ == "__main__":
    source, mountpoint, switch = sys.argv[1:4]
    fuse.FUSE(Switchable(source, switch), mountpoint, foreground=True)
