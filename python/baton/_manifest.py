"""Folder checkpoints: write and verify `baton-manifest.json` (protocol/README.md, contract 1).

A sealed folder `ckpt-<12-digit step>/` holds the trainer's files plus `baton-manifest.json`::

    {"digest":"xxh64:<16 hex>","format":"baton-folder-checkpoint","format_version":1,
     "job":"<job>","step":<step>,"files":[{"path":"a/b.pt","size":42,"xxh64":"<16 hex>"},...]}

Canonical serialization written here (the supervisor's verifier must, and does, accept any
serialization; this is just the one baton's Python side writes): keys in exactly the order
above (`digest` first, each file entry `path`, `size`, `xxh64`), compact separators (`,` and `:`,
no spaces, no trailing newline), UTF-8 without escaping non-ASCII (`ensure_ascii=False`),
`files` sorted bytewise by their UTF-8 `/`-joined relative path. `digest` is XXH64 (seed 0) of
these bytes with the 16 hex digits replaced by sixteen `0`s. A verifier finds the digest by
searching for the quoted value `"xxh64:<16 hex>"`, which must occur exactly once.

Example::

    from baton._manifest import seal_folder, verify_folder
    seal_folder("run/ckpt-000000000100", job="demo", step=100)
    manifest = verify_folder("run/ckpt-000000000100")   # raises CheckpointError if damaged
    print(manifest["files"])
"""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Dict, List, Union

from ._xxh64 import file_xxh64, xxh64_hex

__all__ = ["CheckpointError", "MANIFEST_NAME", "seal_folder", "verify_folder",
           "folder_name", "step_from_name", "list_files"]

MANIFEST_NAME = "baton-manifest.json"
FORMAT = "baton-folder-checkpoint"
FORMAT_VERSION = 1
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_FILES = 100_000
MAX_DEPTH = 32
_ZERO = "0" * 16
_NAME_RE = re.compile(r"^ckpt-(\d{12})(\.safetensors)?$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")

PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(Exception):
    """A checkpoint folder that cannot be sealed or does not verify; the message names the file
    and the reason, e.g. ``/x/ckpt-000000000100/model.pt: size 12 differs from the manifest's
    13``."""


def folder_name(step: int) -> str:
    """`ckpt-<12-digit step>`, the sealed folder's name."""
    return "ckpt-%012d" % step


def step_from_name(path: PathLike) -> "int | None":
    """The step in a `ckpt-<12 digits>` or `ckpt-<12 digits>.safetensors` name, else None."""
    m = _NAME_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def list_files(folder: PathLike) -> List[str]:
    """Every regular file under `folder`, as '/'-joined relative paths sorted bytewise.

    Raises CheckpointError on a symlink or special file (found with lstat), more than 100,000
    files, or a depth over 32. The top-level manifest is left out.
    """
    root = os.fspath(folder)
    out: List[str] = []

    def walk(rel: List[str]) -> None:
        if len(rel) > MAX_DEPTH:
            raise CheckpointError("%s: nested deeper than %d folders" %
                                  (os.path.join(root, *rel), MAX_DEPTH))
        here = os.path.join(root, *rel)
        with os.scandir(here) as it:
            entries = list(it)
        for e in entries:
            st = os.lstat(e.path)
            if stat.S_ISDIR(st.st_mode):
                walk(rel + [e.name])
            elif stat.S_ISREG(st.st_mode):
                if not rel and e.name == MANIFEST_NAME:
                    continue
                out.append("/".join(rel + [e.name]))
                if len(out) > MAX_FILES:
                    raise CheckpointError("%s: more than %d files" % (root, MAX_FILES))
            else:
                raise CheckpointError("%s: %s (only regular files and folders are allowed)" %
                                      (e.path, _kind(st.st_mode)))

    walk([])
    out.sort(key=lambda p: p.encode("utf-8", "surrogateescape"))
    return out


def _encode(manifest: Dict[str, Any]) -> bytes:
    return json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def seal_folder(folder: PathLike, job: str, step: int, fsync: bool = True) -> Dict[str, Any]:
    """Hash every file in `folder`, write its manifest (and fsync files, folders, manifest).

    The folder must not already hold a top-level `baton-manifest.json`. Returns the manifest.
    """
    root = os.fspath(folder)
    if os.path.lexists(os.path.join(root, MANIFEST_NAME)):
        raise CheckpointError("%s: the trainer must not write %s itself" %
                              (os.path.join(root, MANIFEST_NAME), MANIFEST_NAME))
    files = []
    for rel in list_files(root):
        size, digest = file_xxh64(os.path.join(root, *rel.split("/")))
        files.append({"path": rel, "size": size, "xxh64": digest})
    manifest: Dict[str, Any] = {"digest": "xxh64:" + _ZERO, "format": FORMAT,
                                "format_version": FORMAT_VERSION, "job": job, "step": step,
                                "files": files}
    manifest["digest"] = "xxh64:" + xxh64_hex(_encode(manifest))
    raw = _encode(manifest)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise CheckpointError("%s: manifest of %d bytes exceeds %d" %
                              (root, len(raw), MAX_MANIFEST_BYTES))
    with open(os.path.join(root, MANIFEST_NAME), "wb") as f:
        f.write(raw)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    if fsync:
        for rel in files:
            _fsync_path(os.path.join(root, *rel["path"].split("/")))
        for dirpath, _, _ in os.walk(root):
            _fsync_dir(dirpath)
    return manifest


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    if os.name == "nt":  # Windows cannot open a folder for fsync; NTFS journals the rename
        return
    _fsync_path(path)


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError("duplicate key %r" % k)
        out[k] = v
    return out


def _valid_rel(p: Any) -> bool:
    if not isinstance(p, str) or not p or p.startswith("/") or "\\" in p or "\0" in p:
        return False
    return all(c not in ("", ".", "..") for c in p.split("/"))


def verify_folder(folder: PathLike, expect_step: "int | None" = None) -> Dict[str, Any]:
    """Check a sealed folder against its manifest; returns the manifest or raises
    CheckpointError naming the file and the reason (missing, size, xxh64, extra file, ...).

    The step must match the folder's `ckpt-<step>` name when it has one, and `expect_step`
    when given.
    """
    root = os.fspath(folder)
    mpath = os.path.join(root, MANIFEST_NAME)
    try:
        st = os.lstat(root)
    except OSError as e:
        raise CheckpointError("%s: %s" % (root, e.strerror or e)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise CheckpointError("%s: not a folder (%s)" % (root, _kind(st.st_mode)))
    try:
        mst = os.lstat(mpath)
    except FileNotFoundError:
        raise CheckpointError("%s: manifest missing" % mpath) from None
    if not stat.S_ISREG(mst.st_mode):
        raise CheckpointError("%s: manifest is %s" % (mpath, _kind(mst.st_mode)))
    if mst.st_size > MAX_MANIFEST_BYTES:
        raise CheckpointError("%s: manifest too large (%d bytes, at most %d)" %
                              (mpath, mst.st_size, MAX_MANIFEST_BYTES))
    with open(mpath, "rb") as f:
        raw = f.read(MAX_MANIFEST_BYTES + 1)
    try:
        m = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError("%s: manifest is not JSON: %s" % (mpath, e)) from None
    if not isinstance(m, dict):
        raise CheckpointError("%s: manifest is not a JSON object" % mpath)
    if m.get("format") != FORMAT:
        raise CheckpointError("%s: wrong format %r (expected %r)" % (mpath, m.get("format"),
                                                                   FORMAT))
    if m.get("format_version") != FORMAT_VERSION or isinstance(m.get("format_version"), bool):
        raise CheckpointError("%s: unsupported format_version %r (this reads %d)" %
                              (mpath, m.get("format_version"), FORMAT_VERSION))
    digest = m.get("digest")
    if (not isinstance(digest, str) or not digest.startswith("xxh64:")
            or not _HEX16.match(digest[6:])):
        raise CheckpointError("%s: digest missing or malformed" % mpath)
    quoted = ('"%s"' % digest).encode()
    if raw.count(quoted) != 1:
        raise CheckpointError("%s: digest value must occur exactly once" % mpath)
    zeroed = raw.replace(quoted, b'"xxh64:' + _ZERO.encode() + b'"', 1)
    actual = xxh64_hex(zeroed)
    if actual != digest[6:]:
        raise CheckpointError("%s: bad digest (manifest says %s, its bytes hash to xxh64:%s)" %
                              (mpath, digest, actual))
    step = m.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError("%s: step missing or not a non-negative integer" % mpath)
    named = step_from_name(root)
    if named is not None and named != step:
        raise CheckpointError("%s: step %d does not match the folder name %s" %
                              (mpath, step, os.path.basename(root)))
    if expect_step is not None and step != expect_step:
        raise CheckpointError("%s: step %d, expected %d" % (mpath, step, expect_step))
    if not isinstance(m.get("job"), str):
        raise CheckpointError("%s: job missing" % mpath)
    files = m.get("files")
    if not isinstance(files, list):
        raise CheckpointError("%s: files missing" % mpath)
    listed = []
    for i, entry in enumerate(files):
        ok = (isinstance(entry, dict) and set(entry) == {"path", "size", "xxh64"}
              and _valid_rel(entry["path"]) and isinstance(entry["size"], int)
              and not isinstance(entry["size"], bool) and entry["size"] >= 0
              and isinstance(entry["xxh64"], str) and _HEX16.match(entry["xxh64"]))
        if not ok:
            raise CheckpointError("%s: files[%d] is malformed" % (mpath, i))
        listed.append(entry["path"])
    keys = [p.encode("utf-8", "surrogateescape") for p in listed]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise CheckpointError("%s: files not sorted by path or listed twice" % mpath)
    present = list_files(root)
    extra = sorted(set(present) - set(listed))
    if extra:
        raise CheckpointError("%s: extra file (not in the manifest)" %
                              os.path.join(root, *extra[0].split("/")))
    for entry in files:
        path = os.path.join(root, *entry["path"].split("/"))
        try:
            fst = os.lstat(path)
        except FileNotFoundError:
            raise CheckpointError("%s: listed in the manifest but missing" % path) from None
        if not stat.S_ISREG(fst.st_mode):
            raise CheckpointError("%s: not a regular file (%s)" % (path, _kind(fst.st_mode)))
        if fst.st_size != entry["size"]:
            raise CheckpointError("%s: size %d differs from the manifest's %d" %
                                  (path, fst.st_size, entry["size"]))
        size, digest_hex = file_xxh64(path)
        if size != entry["size"]:
            raise CheckpointError("%s: size changed while reading" % path)
        if digest_hex != entry["xxh64"]:
            raise CheckpointError("%s: xxh64 %s differs from the manifest's %s" %
                                  (path, digest_hex, entry["xxh64"]))
    return m
