"""Every file fitplan writes goes through here: `check_outputs` before any work, `write_file` after.

A write is all or nothing. The bytes go to a temporary file in the target's own folder (so the
rename below never crosses file systems), are flushed and fsynced, get the mode the target
has (a new file: 0o666 less the umask, as open() gives), and the temporary file is then renamed
over the target with os.replace, which POSIX makes atomic: a reader sees the old file or the new
one, never a part. When anything fails (a full disk, a file-size limit, a vanished folder) the
temporary file is removed and the target is untouched.

What `check_outputs` refuses, each with one line naming the flag, before any work is done:
  - a folder, a device, a pipe, or a path whose folder does not exist;
  - a symbolic link: fitplan does not write through links (os.replace would replace the link
    itself, leaving its target as it was, which is rarely what was meant); name the file itself;
  - a place where a file cannot be created: the check creates and removes a temporary file in
    the folder, the very thing the write does (so /proc, a read-only mount, or a folder without
    write permission is refused here, not after minutes of measuring);
  - an existing file without write permission (its mode is respected, as cp respects it);
  - an output that is one of the inputs, after resolving links (the same file by device and
    inode, or the same resolved path), and two outputs on one path.

A hard-linked target becomes a new file under its name; its other names keep the old text.
"""
import os
import stat
import tempfile
from contextlib import suppress
from pathlib import Path

from fitplan.errors import SpecError

TEMP_SUFFIX = ".fitplan-part"


def check_outputs(outputs, inputs=()) -> None:
    """outputs and inputs: (flag, path) pairs (path None: not given). A SpecError naming the flag
    when an output cannot be written, is an input, or is another output."""
    taken = {}
    for flag, path in inputs:
        if path is not None:
            for key in _input_identities(Path(path)):
                taken.setdefault(key, f"that is the {flag} input; write to another path")
    for flag, path in outputs:
        if path is None:
            continue
        try:
            _check_destination(Path(path), path, flag)
            key = _identity(Path(path))
        except OSError as error:   # e.g. a name longer than the file system allows
            raise unwritable(path, flag, error) from None
        if key in taken:
            raise SpecError(f"{flag} {path}: {taken[key]}")
        taken[key] = f"the same file as {flag}; give each output its own path"


def _check_destination(p: Path, path: str, flag: str) -> None:
    try:
        info = p.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise SpecError(f"{flag} {path}: a symbolic link (to {os.readlink(p)}); fitplan does not write through "
                        f"links: name the file itself")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise SpecError(f"{flag} {path}: that is a folder; name a file in it")
    folder = p.parent
    if not folder.is_dir():
        raise SpecError(f"{flag} {path}: the folder {str(folder)!r} does not exist; create it or pick another path")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise SpecError(f"{flag} {path}: not a regular file (a device or pipe); name a file")
    if info is not None and not os.access(p, os.W_OK):
        raise SpecError(f"{flag} {path}: not writable here; pick another path")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=_temp_prefix(p), suffix=TEMP_SUFFIX)
    except OSError as error:
        raise SpecError(f"{flag} {path}: cannot create a file in {str(folder)!r} "
                        f"({error.strerror or type(error).__name__}); pick another path") from None
    os.close(fd)
    os.unlink(probe)


def _identity(p: Path):
    """What makes two paths one file: device and inode when it exists, else the resolved path."""
    try:
        info = p.stat()
        return ("inode", info.st_dev, info.st_ino)
    except OSError:
        return ("path", os.path.realpath(p))


def _input_identities(p: Path) -> list:
    """An input path, and for a folder (--hf-config takes one) the config.json read in it."""
    try:
        keys = [_identity(p)]
        if p.is_dir():
            keys.append(_identity(p / "config.json"))
        return keys
    except OSError:     # an unreadable input is reported when it is read
        return []


def _temp_prefix(p: Path) -> str:
    """A hidden name beside the target, short enough whatever the target's name's length."""
    return "." + p.name[:32] + "."


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_file(path, data: bytes | str) -> None:
    """Write data (text is UTF-8) to path all or nothing (see the module's docstring). Raises
    OSError, with the temporary file removed and the target unchanged."""
    p = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        mode = stat.S_IMODE(p.stat().st_mode)
    except FileNotFoundError:
        mode = _new_file_mode()
    fd, temp = tempfile.mkstemp(dir=p.parent, prefix=_temp_prefix(p), suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, mode)
        os.replace(temp, p)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    _sync_folder(p.parent)


def _sync_folder(folder: Path) -> None:
    """fsync the folder so the rename itself survives a crash (best effort: not every file system
    lets a folder be opened or synced)."""
    with suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_output(path, data: bytes | str, flag: str) -> None:
    """write_file, its failure one SpecError naming the flag."""
    try:
        write_file(path, data)
    except OSError as error:
        raise unwritable(path, flag, error) from None


def unwritable(path, flag: str, error: OSError) -> SpecError:
    return SpecError(f"{flag} {path}: cannot write it ({error.strerror or type(error).__name__}); pick another path")
