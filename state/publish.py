"""The one way the tool writes a file: :func:`publish` (whole files, atomically) and
:func:`append` (journals and ledgers), both refusing to follow links.

An output directory may be shared (a project's perf-run archive, a scratch folder other users
can write into), and the tool often runs as root. A name planted there as a symbolic link
(``report.md -> /etc/passwd``), a linked sub-folder (``.ai4s-graph -> /etc``), a hard link to
another file or a FIFO must never make the tool write somewhere else, and a crash or a full disk
must never leave a half-written report beside the old one. So every write:

* walks from ``root`` (the output directory the user named; it may itself sit behind a link the
  user chose) down to the file's folder one component at a time with ``os.open(...,
  O_DIRECTORY | O_NOFOLLOW, dir_fd=...)``: a folder that is a link, or not a folder, is refused;
  missing folders are created on the way (``mkdir`` never follows a link either);
* :func:`publish`: writes a temporary file in that same folder (``O_CREAT | O_EXCL | O_NOFOLLOW``),
  ``fsync``s it, and only then renames it over the target (``rename(2)`` replaces the name, never
  what a link points to); the folder is ``fsync``ed after the rename. A target that is a link, a
  folder or a special file is refused before anything is written. :func:`publish_many` stages
  every file first and renames only when all of them are complete, so a report's ``.json`` and
  ``.md`` are replaced together or not at all;
* :func:`append`: ``O_APPEND | O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks), then refuses
  anything but a regular file with one link.

The new file gets the mode ``open(path, "w")`` would give it (``0o666`` less the umask: the
kernel applies the umask to ``os.open``'s mode).

Errors: :class:`UnsafePathError` (a ``PermissionError``: one line naming the path and what is wrong
with it); any other ``OSError`` (``ENOSPC``, ``EFBIG``, ``EACCES``) propagates unchanged after the
temporary files are removed, and the earlier file is left as it was.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import contextlib
import threading
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, Sequence, Union

Data = Union[bytes, bytearray, memoryview, str]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: Held while temporary files are renamed over their targets (:func:`publish_many`'s rename of all
#: its files, :func:`publish_stream`'s): what :func:`freeze` takes, so that a process stopping at once
#: never leaves a set half renamed by another thread (a new report.json beside the old report.md).
_RENAMING = threading.RLock()
#: The temporary files being written and not yet renamed or removed, as ``(folder fd, name)``
#: (:func:`freeze` removes them).
_IN_FLIGHT: set[tuple[int, str]] = set()
#: An RLock: a signal handler (in the thread it interrupts) may take it while that thread holds it.
_IN_FLIGHT_LOCK = threading.RLock()
#: The renames in progress (each :func:`publish_many`'s list of staged files still to rename), for
#: :func:`freeze` to finish when it interrupts the very thread renaming them.
_RENAMES: list[list[tuple[int, str, str, Path]]] = []


def _staging(dfd: int, tmp: str) -> None:
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT.add((dfd, tmp))


def _staged_done(dfd: int, tmp: str) -> None:
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT.discard((dfd, tmp))


#: Seconds :func:`freeze` waits for a rename in progress in another thread (renames and a folder
#: ``fsync``: milliseconds).
FREEZE_WAIT_S = 5.0


def freeze(wait_s: float = FREEZE_WAIT_S) -> Callable[[], None]:
    """Stop this process's publishing before it exits at once (``ai4s-graph run`` on a signal):
    waits up to ``wait_s`` for a rename in progress in another thread to end and keeps any other
    from starting (every target is then either its old file or its new one, a set of files all old
    or all new; a set the calling thread itself was renaming when the signal came is renamed to
    its end), then removes the temporary files being written (``.<name>.<hex>.tmp``, which the
    exit would leave behind). Returns the function that lets publishing go on (the tests'; a
    stopping process never calls it: its publishing threads wait until the exit). Never raises."""
    got = _RENAMING.acquire(timeout=wait_s)
    for staged in list(_RENAMES):  # held by this very thread, cut short mid-set: finish the set
        for dfd, tmp, name, _shown in list(staged):
            try:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError:  # renamed just before the signal
                pass
            _staged_done(dfd, tmp)
        staged.clear()
    with _IN_FLIGHT_LOCK:
        items = list(_IN_FLIGHT)
        _IN_FLIGHT.clear()
    for dfd, tmp in items:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:  # renamed or removed meanwhile, or its folder closed: nothing left of it here
            pass
    return _RENAMING.release if got else (lambda: None)


class UnsafePathError(PermissionError):
    """A write was refused: the target or a folder on its way is a link, not a folder, not a
    regular file, or a hard link to another file. ``str(err)`` is one line."""

    def __init__(self, message: str):
        super().__init__(errno.EPERM, " ".join(str(message).split()))

    def __str__(self) -> str:
        return self.strerror


def _split(path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> tuple[Path, tuple[str, ...], str]:
    """``(root, folders below root, file name)`` of ``path`` (both made absolute, links NOT
    resolved). Raises ``ValueError`` when ``path`` is not under ``root``."""
    p = Path(os.path.abspath(path))
    r = Path(os.path.abspath(root)) if root is not None else p.parent
    try:
        rel = p.relative_to(r)
    except ValueError:
        raise ValueError(f"{p} is not under {r}") from None
    if not rel.parts or any(x in ("", ".", "..") for x in rel.parts):
        raise ValueError(f"{p}: not a file name under {r}")
    return r, rel.parts[:-1], rel.parts[-1]


def _open_root(root: Path, create: bool) -> int:
    if create:
        os.makedirs(root, exist_ok=True)
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError:
        raise UnsafePathError(f"{root} is not a folder: refused") from None


def _descend(fd: int, root: Path, parts: Sequence[str], create: bool) -> int:
    """The fd of ``root/parts...`` reached from ``fd`` (closed here) without following a link."""
    where = root
    for part in parts:
        where = where / part
        if create:
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            except BaseException:
                os.close(fd)
                raise
        try:
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as e:
            try:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    is_link = stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
                    raise UnsafePathError(f"{where} is a symbolic link: refused to write through it" if is_link
                                          else f"{where} is not a folder: refused") from None
                raise
            finally:
                os.close(fd)
        os.close(fd)
        fd = nfd
    return fd


def folder_fd(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, *,
              create: bool = True) -> tuple[int, str]:
    """``(fd of the folder that holds path, file name)``, every folder from ``root`` down checked
    (see the module docstring). The caller closes the fd. Raises :class:`UnsafePathError`."""
    r, parts, name = _split(path, root)
    return _descend(_open_root(r, create), r, parts, create), name


def check_mode(st: os.stat_result, shown: str | os.PathLike[str], *, folder: bool = False) -> None:
    """Refuse (:class:`UnsafePathError`) what an ``lstat`` result shows at ``shown`` when the tool
    must not write there: a symbolic link; with ``folder``, anything but a folder; else anything but a
    regular file."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{shown} is a symbolic link: refused to write through it")
    if folder and not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{shown} is not a folder: refused")
    if not folder and not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{shown} exists and is not a regular file: refused")


def _check_target(dfd: int, name: str, shown: Path) -> None:
    try:
        check_mode(os.stat(name, dir_fd=dfd, follow_symlinks=False), shown)
    except FileNotFoundError:
        return


def check_writable(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> None:
    """Refuse (:class:`UnsafePathError`) when writing ``path`` would follow a link: the target,
    or a folder between ``root`` and it, is a link or not what it should be. Creates nothing."""
    r, parts, name = _split(path, root)
    if not r.exists():
        return
    try:
        fd = _descend(_open_root(r, create=False), r, parts, create=False)
    except FileNotFoundError:  # a folder on the way does not exist yet: it will be created as a folder
        return
    try:
        _check_target(fd, name, r.joinpath(*parts, name))
    finally:
        os.close(fd)


def ensure_dir(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Create the folder ``path`` (and those above it, up to ``root``) refusing any link on the
    way; returns ``path``. Raises :class:`UnsafePathError`."""
    p = Path(os.path.abspath(path))
    r = Path(os.path.abspath(root)) if root is not None else p.parent
    try:
        parts = p.relative_to(r).parts
    except ValueError:
        raise ValueError(f"{p} is not under {r}") from None
    os.close(_descend(_open_root(r, True), r, parts, True))
    return p


def _as_bytes(data: Data) -> bytes | memoryview:
    if isinstance(data, str):
        return data.encode("utf-8")
    return memoryview(data)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def publish_many(items: Iterable[tuple[str | os.PathLike[str], Data]],
                 root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Write every ``(path, data)`` (``str`` is written as UTF-8) atomically and together: each
    to a temporary file beside its target, all ``fsync``ed, then all renamed over their targets.
    ``root``: the output directory the paths lie under (default: each file's own folder).

    Returns the paths written. Raises :class:`UnsafePathError` (a link or a non-regular file at a
    target or a folder on the way: nothing is written) and ``OSError`` (disk full, file too big,
    permission): then no target is replaced, and the temporary files are removed."""
    staged: list[tuple[int, str, str, Path]] = []
    fds: list[int] = []
    done: list[Path] = []
    try:
        for path, data in items:
            shown = Path(os.path.abspath(path))
            dfd, name = folder_fd(shown, root)
            fds.append(dfd)
            _check_target(dfd, name, shown)
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                         dir_fd=dfd)
            staged.append((dfd, tmp, name, shown))
            _staging(dfd, tmp)
            try:
                _write_all(fd, _as_bytes(data))
                os.fsync(fd)
            finally:
                os.close(fd)
        for dfd, tmp, name, shown in staged:
            _check_target(dfd, name, shown)
        with _RENAMING:
            _RENAMES.append(staged)
            try:
                while staged:
                    dfd, tmp, name, shown = staged[0]
                    os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                    staged.pop(0)
                    _staged_done(dfd, tmp)
                    done.append(shown)
            finally:
                _RENAMES.remove(staged)
            for dfd in set(fds):
                os.fsync(dfd)
        return done
    finally:
        for dfd, tmp, _, _ in staged:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            _staged_done(dfd, tmp)
        for dfd in set(fds):
            os.close(dfd)


def publish(path: str | os.PathLike[str], data: Data, root: str | os.PathLike[str] | None = None) -> Path:
    """Write one file atomically (see :func:`publish_many`). Returns ``path`` as an absolute Path."""
    return publish_many([(path, data)], root)[0]


@contextlib.contextmanager
def publish_stream(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s content into piece by piece (a file too big to hold in
    memory, e.g. an annotated trace); published like :func:`publish` when the block ends without
    an exception (temporary file beside the target, ``fsync``, rename; links refused). On an
    exception the temporary file is removed and ``path`` is untouched. Raises
    :class:`UnsafePathError` or ``OSError``."""
    shown = Path(os.path.abspath(path))
    dfd, name = folder_fd(shown, root)
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    staged = False
    try:
        _check_target(dfd, name, shown)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dfd)
        staged = True
        _staging(dfd, tmp)
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _check_target(dfd, name, shown)
        with _RENAMING:
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            staged = False
            _staged_done(dfd, tmp)
            os.fsync(dfd)
    finally:
        if staged:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            _staged_done(dfd, tmp)
        os.close(dfd)


def append(path: str | os.PathLike[str], data: Data, root: str | os.PathLike[str] | None = None, *,
           sync: bool = False) -> Path:
    """Append ``data`` to ``path`` (created when missing), refusing a link at the target or on
    the way (``O_NOFOLLOW``), a FIFO or device (``O_NONBLOCK``, then not a regular file) and a hard
    link to another file (more than one link: the append would change that file too).
    ``sync``: ``fsync`` after the write (ledgers that must survive a crash). Returns the path.
    Raises :class:`UnsafePathError` or ``OSError``."""
    shown = Path(os.path.abspath(path))
    dfd, name = folder_fd(shown, root)
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         0o666, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafePathError(f"{shown} is a symbolic link: refused to write through it") from None
            if e.errno in (errno.ENXIO, errno.EISDIR):
                raise UnsafePathError(f"{shown} exists and is not a regular file: refused") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"{shown} exists and is not a regular file: refused")
            if st.st_nlink > 1:
                raise UnsafePathError(f"{shown} is a hard link to another file: refused to write into it")
            _write_all(fd, _as_bytes(data))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
    return shown
