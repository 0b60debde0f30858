"""Corpora through the Hugging Face ``datasets`` library: local ``.txt``/``.parquet`` files and Hub datasets.

The rows of the text column are joined with a newline between them (none is added after a row that already ends with
one, so text files come back as written, modulo universal-newline translation), then UTF-8 encoded. A Hub load goes
offline at once when the hub is unreachable (or ``HF_HUB_OFFLINE`` is set, even after import), so it is served from
the local HF cache or fails fast with a ConfigError instead of retrying for tens of seconds.

Every load passes ``trust_remote_code=False``: a Hub dataset with a loading script would otherwise run that script
(the default in ``datasets`` < 3.0, which pyproject.toml no longer admits; 4.0 dropped scripts and ignores a false).
"""
from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

from islands_kit.config import ConfigError, _check


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



def load_files_bytes(files: list[str], text_field: str, hf_cache: str | None) -> bytes:
    """The bytes of local ``.txt`` files (each file one row) or ``.parquet`` files (the ``text_field`` column)."""
    import datasets

    kinds = {Path(f).suffix for f in files}
    _check(kinds in ({".txt"}, {".parquet"}), "data.corpus", "files must all be .txt or all be .parquet", sorted(kinds))
    try:
        if kinds == {".txt"}:
            # one row per file, so the join below restores each file exactly (plus a newline between files)
            ds = datasets.load_dataset("text", data_files=files, split="train", sample_by="document",
                                       cache_dir=hf_cache, trust_remote_code=False)
            return _join_rows(_rows(ds, "text"), "data.corpus")
        ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=hf_cache,
                                   trust_remote_code=False)
        return _join_rows(_rows(ds, text_field), "data.text_field")
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a file datasets cannot read: one line naming the field, not its traceback
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise ConfigError(f"data.corpus: datasets could not read {len(files)} local file(s) starting with {files[0]} "
                          f"({type(e).__name__}: {first})") from None



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


def load_hub_bytes(name: str, config: str | None, text_field: str, hf_cache: str | None, split: str = "train",
                   revision: str | None = None, streaming: bool = False, max_bytes: int = 0) -> bytes:
    """The bytes of split ``split`` of Hub dataset ``name`` (config ``config``, pinned to ``revision`` when given),
    column ``text_field``. ``streaming``: rows are read over the network one by one until ``max_bytes`` bytes are
    joined, without downloading the dataset."""
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")  # effective only if huggingface_hub is not imported yet
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    import datasets

    declared_offline = _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")
    local = Path(name).expanduser().is_dir()  # a dataset folder on disk (load_dataset reads it like a hub repo)
    offline = declared_offline or (not local and not _hub_reachable(
        float(os.environ.get("ISLANDS_KIT_HUB_PROBE_TIMEOUT", "3"))))
    what = f"hub dataset {name!r}" + (f" (config {config!r})" if config else "")
    try:
        with _hf_offline(offline):  # offline: served from the local HF cache, or a fast failure
            ds = datasets.load_dataset(name, config, split=split, revision=revision, streaming=streaming,
                                       cache_dir=hf_cache, trust_remote_code=False)
            if streaming:
                return _stream_bytes(ds, text_field, max_bytes)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure here becomes one clear config error
        msg = f"{type(e).__name__}: {e}"
        if isinstance(e, ValueError) and "split" in str(e).lower():  # Unknown split "x". Should be one of [...]
            raise ConfigError(f"data.split: {what} has no split {split!r} ({msg})") from None
        if revision and ("revision" in msg.lower() or "Revision" in type(e).__name__):
            raise ConfigError(f"data.revision: {what} has no revision {revision!r} ({msg})") from None
        why = ("HF_HUB_OFFLINE is set and it is not in the local cache" if declared_offline
               else "the hub is unreachable and it is not in the local cache" if offline else "see the cause")
        raise ConfigError(f"data.corpus: could not load {what} (offline?): {why}: {msg}") from e
    return _join_rows(_rows(ds, text_field), "data.text_field")


def _stream_bytes(ds: Any, text_field: str, max_bytes: int) -> bytes:
    """Join the ``text_field`` of streamed rows until ``max_bytes`` bytes (or the end of the stream)."""
    parts: list[bytes] = []
    size = 0
    for row in ds:
        _check(text_field in row, "data.text_field", f"must name a column of the dataset (columns: {sorted(row)})",
               text_field)
        text = row[text_field]
        if text is None:
            continue
        _check(isinstance(text, str), "data.text_field", "must be a column of strings", type(text).__name__)
        if parts and not parts[-1].endswith(b"\n"):
            parts.append(b"\n")
            size += 1
        parts.append(text.encode("utf-8"))
        size += len(parts[-1])
        if size >= max_bytes:
            break
    return b"".join(parts)[:max_bytes]
