"""Folder manifests (design-10 section 1): round trip, canonical bytes, and every damage kind."""
import json
import os
import random
import shutil

import pytest
import xxhash  # Debian python3-xxhash: the C library, to check the pure-Python fallback too

import baton
from baton import _manifest, _xxh64
from baton._manifest import CheckpointError, seal_folder, verify_folder


def make(tmp_path, step=100):
    d = tmp_path / ("ckpt-%012d" % step)
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "model.pt").write_bytes(os.urandom(5000))
    (d / "sub" / "opt.pt").write_bytes(b"adam" * 100)
    (d / "sub" / "deeper" / "empty").write_bytes(b"")
    (d / "Z-upper.txt").write_text("bytewise order puts Z before m")
    seal_folder(d, job="demo", step=step)
    return d


def test_round_trip_and_canonical_bytes(tmp_path):
    d = make(tmp_path)
    raw = (d / "baton-manifest.json").read_bytes()
    m = verify_folder(d)
    assert raw.startswith(b'{"digest":"xxh64:')
    assert list(m) == ["digest", "format", "format_version", "job", "step", "files"]
    assert [f["path"] for f in m["files"]] == ["Z-upper.txt", "model.pt", "sub/deeper/empty",
                                               "sub/opt.pt"]
    zeroed = raw.replace(m["digest"].encode(), b"xxh64:" + b"0" * 16)
    assert xxhash.xxh64(zeroed, seed=0).hexdigest() == m["digest"][6:]
    assert json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode() == raw
    for f in m["files"]:
        data = (d / f["path"]).read_bytes()
        assert f["size"] == len(data) and f["xxh64"] == xxhash.xxh64(data).hexdigest()


def test_pure_python_xxh64_matches_the_c_library():
    rng = random.Random(1)
    for n in list(range(0, 70)) + [1000, 4096, 100003]:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        h = _xxh64.PureHasher()
        cut = rng.randint(0, n)
        h.update(data[:cut])
        h.update(data[cut:])
        assert h.hexdigest() == xxhash.xxh64(data).hexdigest(), n
    assert _xxh64.HAVE_XXHASH


def test_a_folder_sealed_by_hand_as_protocol_readme_shows(tmp_path):
    """What another writer (the C++ supervisor) produces in another key order verifies too."""
    d = tmp_path / "ckpt-000000000007"
    d.mkdir()
    (d / "a.bin").write_bytes(b"abc")
    files = [{"xxh64": xxhash.xxh64(b"abc").hexdigest(), "path": "a.bin", "size": 3}]
    doc = {"digest": "xxh64:" + "0" * 16, "files": files, "format": "baton-folder-checkpoint",
           "format_version": 1, "job": "j", "step": 7}
    text = json.dumps(doc, indent=1)
    text = text.replace("0" * 16, xxhash.xxh64(text.encode()).hexdigest(), 1)
    (d / "baton-manifest.json").write_text(text)
    assert verify_folder(d)["step"] == 7


def expect(d, *words):
    with pytest.raises(CheckpointError) as e:
        verify_folder(d)
    for w in words:
        assert w in str(e.value), str(e.value)
    return str(e.value)


def test_flipped_byte(tmp_path):
    d = make(tmp_path)
    p = d / "model.pt"
    b = bytearray(p.read_bytes())
    b[1234] ^= 0x10
    p.write_bytes(bytes(b))
    expect(d, str(p), "xxh64")


def test_truncated_file(tmp_path):
    d = make(tmp_path)
    p = d / "sub" / "opt.pt"
    p.write_bytes(p.read_bytes()[:-1])
    expect(d, str(p), "size 399 differs from the manifest's 400")


def test_missing_file(tmp_path):
    d = make(tmp_path)
    (d / "sub" / "opt.pt").unlink()
    expect(d, str(d / "sub" / "opt.pt"), "missing")


def test_extra_file(tmp_path):
    d = make(tmp_path)
    (d / "sub" / "stray.tmp").write_bytes(b"x")
    expect(d, str(d / "sub" / "stray.tmp"), "extra file")


def test_lying_manifest(tmp_path):
    d = make(tmp_path)
    mp = d / "baton-manifest.json"
    m = json.loads(mp.read_bytes())
    m["files"][1]["size"] += 1  # edited without recomputing the digest
    mp.write_text(json.dumps(m, separators=(",", ":")))
    expect(d, "bad digest")
    # A liar who recomputes the digest is caught by the file itself.
    m["digest"] = "xxh64:" + "0" * 16
    text = json.dumps(m, separators=(",", ":"))
    mp.write_text(text.replace("0" * 16, xxhash.xxh64(text.encode()).hexdigest(), 1))
    expect(d, str(d / "model.pt"), "size")


def test_manifest_problems(tmp_path):
    d = make(tmp_path)
    mp = d / "baton-manifest.json"
    good = mp.read_bytes()
    mp.write_bytes(good[:-1])
    expect(d, "not JSON")
    mp.write_bytes(good.replace(b'"job":"demo"', b'"job":"demo","job":"x"'))
    expect(d, "duplicate key")
    mp.write_bytes(good.replace(b'"format_version":1', b'"format_version":2'))
    expect(d, "format_version")
    mp.unlink()
    expect(d, "manifest missing")
    # a step that does not match the folder's name
    d2 = make(tmp_path, step=5)
    os.rename(d2, tmp_path / "ckpt-000000000006")
    expect(tmp_path / "ckpt-000000000006", "does not match the folder name")


def test_symlink_and_forged_manifest(tmp_path):
    d = make(tmp_path)
    os.symlink(d / "model.pt", d / "sub" / "link")
    expect(d, str(d / "sub" / "link"), "symlink")
    e = tmp_path / "staging"
    e.mkdir()
    (e / "baton-manifest.json").write_text("{}")
    with pytest.raises(CheckpointError, match="must not write"):
        seal_folder(e, job="j", step=1)


def test_random_corruptions_are_never_accepted(tmp_path):
    """1,000 random damages (a flipped bit anywhere, a truncation, a byte appended), to any
    file or the manifest: every one is rejected."""
    base = make(tmp_path / "base")
    files = sorted(p for p in base.rglob("*") if p.is_file() and p.stat().st_size > 0)
    rng = random.Random(10)
    work = tmp_path / "work" / base.name
    for i in range(1000):
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(base, work)
        target = work / rng.choice(files).relative_to(base)
        data = bytearray(target.read_bytes())
        kind = rng.choice(["flip", "truncate", "append"])
        if kind == "flip":
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            data = data[:rng.randrange(len(data))]
        else:
            data.append(rng.randrange(256))
        target.write_bytes(bytes(data))
        with pytest.raises(CheckpointError):
            verify_folder(work)
