"""Safe, atomic file writes: every file exactmem writes goes through this module.

A new file is created under an unpredictable name in the target folder
(:func:`tempfile.mkstemp`: ``O_CREAT | O_EXCL``, so it can never be a symlink someone
planted), filled, flushed to disk and then :func:`os.replace`'d onto the target.  Readers
see the old file or the whole new one, never a half-written one, and nothing follows a
symlink: one at the target name is replaced by the file, its target left untouched.

* :func:`write_bytes_atomic` / :func:`write_text_atomic`: the whole content at once;
* :func:`atomic_path`: a context manager yielding a fresh temporary path, for libraries
  that insist on writing to a path themselves (``onnx.save``, ``safetensors.save_file``,
  ``torch.save``, ``savefig``).  The path lies in a private (``0o700``) folder made by
  :func:`tempfile.mkdtemp` in the target folder, so nobody else can swap it for a link
  while the library writes; on a clean exit it is renamed onto the target, on an exception
  it is removed and the target is left as it was.

The file gets the mode a plain ``open(path, "w")`` would give it (``0o666`` less the
user's umask), or keeps the mode of the regular file it replaces.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from exactmem.errors import OutputError


def _mode_for(path: Path) -> int:
    try:
        info = os.lstat(path)  # a symlink's target is not ours to copy a mode from
        if stat.S_ISREG(info.st_mode):
            return stat.S_IMODE(info.st_mode)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def check_writable(path: str | Path) -> Path:
    """Fail early, before any long work, when ``path`` cannot be an output file."""
    path = Path(path)
    folder = _folder(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory")
    if not folder.is_dir():
        raise OutputError(f"cannot write {path}: no such folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: no permission to write in {folder}")
    return path


def _refuse_dir(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        raise OutputError(f"cannot write {path}: it is a directory")


def _output_error(path: Path, exc: OSError) -> OutputError:
    why = "no such folder" if not _folder(path).is_dir() else exc.strerror or str(exc)
    return OutputError(f"cannot write {path}: {why}")


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    path = Path(path)
    _refuse_dir(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=_folder(path))
    except OSError as exc:
        raise _output_error(path, exc) from exc
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path that becomes ``path`` when the block ends without an error.

    The temporary file already exists (empty, created by :func:`tempfile.mkstemp`) inside a
    private folder in ``path``'s folder; the caller's library overwrites it.  An exception
    in the block removes it and leaves ``path`` untouched."""
    path = Path(path)
    _refuse_dir(path)
    try:
        private = tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=_folder(path))
    except OSError as exc:
        raise _output_error(path, exc) from exc
    try:
        try:
            fd, tmp = tempfile.mkstemp(prefix="part.", dir=private)
            os.close(fd)
        except OSError as exc:
            raise _output_error(path, exc) from exc
        yield Path(tmp)
        try:
            if not stat.S_ISREG(os.lstat(tmp).st_mode):
                raise OutputError(f"cannot write {path}: the writer left no regular file")
            os.chmod(tmp, _mode_for(path))
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OutputError:
            raise
        except OSError as exc:
            raise _output_error(path, exc) from exc
    finally:
        shutil.rmtree(private, ignore_errors=True)
