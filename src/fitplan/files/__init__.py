"""The file boundary: spec files (TOML, JSON) and Hugging Face config.json in, TOML out.
Outside the pure core on purpose: these modules read files.

Every file is read through `read_small_text`: a spec file or a config.json is a few KiB, so
anything that is not a regular file (a folder, a device such as /dev/zero, a pipe, a socket,
a link to one of those) or is larger than MAX_FILE_BYTES is refused before a byte is read,
and a parsed document nested deeper than MAX_DEPTH is refused after parsing.
"""
import json
import os
import stat
import tomllib
from pathlib import Path

from fitplan.errors import SpecError

MAX_FILE_BYTES = 1 << 20      # 1 MiB: a spec file or config.json is kilobytes
MAX_DEPTH = 16                # tables and lists inside each other; a spec file uses 3


def read_small_text(path: Path, where: str, what: str = "a spec file") -> str:
    """The text of a small regular UTF-8 file, or a SpecError saying why not."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SpecError(f"{where}: no such file; check the path") from None
    except OSError as err:
        raise SpecError(f"{where}: cannot read the file ({err.__class__.__name__}); check the path") from None
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(f"{where}: that is a folder; name the file itself")
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(f"{where}: not a regular file (a device, pipe or socket); name {what}")
    if info.st_size > MAX_FILE_BYTES:
        raise SpecError(f"{where}: {info.st_size:,} bytes is too large for {what} (limit {MAX_FILE_BYTES:,} bytes); "
                        f"check the path")
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise SpecError(f"{where}: cannot read the file ({err.__class__.__name__}); check the path") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"{where}: larger than {MAX_FILE_BYTES:,} bytes, too large for {what}; check the path")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{where}: not UTF-8 text; is this {what}?") from None


def parse_json(text: str, where: str):
    """json.loads, its every failure (syntax, an integer of over 4,300 digits, deep nesting)
    one SpecError, and the depth bounded."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(f"{where}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                        f"fix the syntax") from None
    except (ValueError, RecursionError) as err:
        raise SpecError(f"{where}: not valid JSON ({_reason(err)}); fix the file") from None
    check_depth(data, where)
    return data


def parse_toml(text: str, where: str) -> dict:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{where}: not valid TOML ({err}); fix the syntax") from None
    except (ValueError, RecursionError) as err:
        raise SpecError(f"{where}: not valid TOML ({_reason(err)}); fix the file") from None
    check_depth(data, where)
    return data


def _reason(err: Exception) -> str:
    if isinstance(err, RecursionError):
        return "nested too deeply"
    if "digits" in str(err):
        return "a number with more than 4,300 digits"
    return err.__class__.__name__


def check_depth(data, where: str) -> None:
    """Iteratively (no recursion to exhaust): refuse a document nested deeper than MAX_DEPTH."""
    todo = [(data, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise SpecError(f"{where}: nested deeper than {MAX_DEPTH} levels; a spec file or config.json uses a few")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        todo.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
