"""Files a console run as root can write without being redirected by another user.

- The incident directory must belong to the user running the console and must not be
  writable by group or others (anyone who can write there could plant a symlink or swap a
  file); otherwise ``UnsafeDirectory`` (the CLI prints its one line and exits 2).
- Incident files are opened with ``O_NOFOLLOW | O_CLOEXEC`` and must be regular files of
  the user's own.
- Exports are written to a fresh temporary file in the target's directory
  (``O_CREAT | O_EXCL | O_NOFOLLOW``, 0600) and renamed over the target: a symlink already at
  the target is replaced, never followed.
"""
from __future__ import annotations

import os
import pwd
import secrets
import stat
from pathlib import Path


class UnsafeDirectory(PermissionError):
    """The incident directory could be changed under us by someone else."""


class UnsafeFile(PermissionError):
    """An incident file that is a symlink, not a regular file, or someone else's."""


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_dir(directory: Path) -> list[str]:
    """Raise UnsafeDirectory unless ``directory`` is the user's own and writable only by them;
    return warnings (readable by others)."""
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"incident dir {directory} is not a directory")
    me = os.geteuid()
    if st.st_uid != me:
        raise UnsafeDirectory(f"incident dir {directory} belongs to {_owner(st.st_uid)}, not to "
                              f"{_owner(me)}: refusing to write there (choose another with --incident-dir)")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)
        raise UnsafeDirectory(f"incident dir {directory} is writable by {who} (mode {mode:04o}): "
                              f"refusing to write there (chmod go-w it, or choose another with --incident-dir)")
    if mode & 0o044:
        return [f"incident dir {directory} is readable by others (mode {mode:04o})"]
    return []


def open_incident_file(path: Path) -> int:
    """The incident file opened for reading and appending (created 0600 when absent)."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFile(f"{path} is a symbolic link: refusing to write through it") from None
        raise exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path} is not a regular file: refusing to write to it")
        if st.st_uid != os.geteuid():
            raise UnsafeFile(f"{path} belongs to {_owner(st.st_uid)}, not to {_owner(os.geteuid())}: "
                             "refusing to write to it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> Path:
    """``data`` as the new content of ``path`` (0600): a temp file beside it, fsynced, renamed
    over it. Whatever is at ``path`` (a symlink included) is replaced, never written through.
    ``durable=False`` skips the fsyncs (a file rewritten every second, such as the live state:
    a reader sees the old or the new content whole either way)."""
    path = Path(path)
    directory = path.parent
    name = path.name
    if not name or name in (".", ".."):
        raise IsADirectoryError(f"{path} is a directory")
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if os.path.isdir(path) and not os.path.islink(path):
                raise IsADirectoryError(f"{path} is a directory")
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        if durable:
            try:
                os.fsync(dfd)
            except OSError:
                pass
    finally:
        os.close(dfd)
    return path


def read_own_file(path: str | os.PathLike[str], limit: int, *, tail: bool = False) -> bytes:
    """The bytes of a regular file of the user's own, opened without following a symlink
    (UnsafeFile otherwise; FileNotFoundError when absent; ValueError past ``limit`` bytes).
    ``tail``: a larger file gives its last ``limit`` bytes from the first whole line in them
    (a log read back for its newest lines)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFile(f"{path} is a symbolic link: refusing to read through it") from None
        raise exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise UnsafeFile(f"{path} belongs to {_owner(st.st_uid)}, not to {_owner(os.geteuid())}")
        if st.st_size > limit and tail:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
            data = b""
            while len(data) < limit:
                chunk = os.read(fd, min(limit - len(data), 1 << 20))
                if not chunk:
                    break
                data += chunk
            return data.partition(b"\n")[2]          # the first line is cut: left out
        if st.st_size > limit:
            raise ValueError(f"{path} is larger than {limit >> 20} MiB")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise ValueError(f"{path} is larger than {limit >> 20} MiB")
        return data
    finally:
        os.close(fd)
