"""The data options of ``DataConfig``: ``text_field`` (a parquet file whose text column is ``content``, end to end),
hub ``split``, ``revision``, ``streaming`` with ``max_bytes``, each with its own clear error.

Hub datasets are exercised offline through a dataset folder on disk (``hub:/path``: ``datasets.load_dataset`` reads it
the way it reads a hub repository, splits included); the revision is checked where the kit hands it to ``datasets``.
"""
from __future__ import annotations

import json

import pyarrow as pa  # pyarrow comes with datasets
import pyarrow.parquet as pq
import pytest

from islands_kit import cli
from islands_kit.config import ConfigError, DataConfig, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.data import hf, load_corpus


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # datasets' cache stays in the test's folder


@pytest.fixture
def hub_dir(tmp_path):
    """A dataset repository layout on disk: data/train-*.parquet and data/test-*.parquet, text in ``content``."""
    d = tmp_path / "ds" / "data"
    d.mkdir(parents=True)
    pq.write_table(pa.table({"content": ["alpha " * 50, "beta " * 50, "gamma"]}), d / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"content": ["test row one", "test row two"]}), d / "test-00000-of-00001.parquet")
    return d.parent


def test_parquet_with_a_content_column_trains_through_text_field(tmp_path, capsys):
    text = load_corpus("shakespeare").data[:120_000].decode("utf-8", "ignore")
    docs = [text[i:i + 3000] for i in range(0, len(text), 3000)]
    pq.write_table(pa.table({"content": docs, "n": list(range(len(docs)))}), tmp_path / "code.parquet")
    spec = str(tmp_path / "code.parquet")
    out = tmp_path / "run"
    assert cli.main(["run", "baseline", "--set", f"data.corpus={spec}", "--set", "steps=2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "data.text_field: must name a column of the dataset (columns: ['content', 'n']) (got 'text')" in err
    assert cli.main(["run", "baseline", "--set", f"data.corpus={spec}", "--set", "data.text_field=content",
                     "--set", "steps=2", "--out", str(out)]) == 0
    res = json.loads((out / "result.json").read_text())
    want = "".join(d + ("" if d.endswith("\n") or i == len(docs) - 1 else "\n") for i, d in enumerate(docs)).encode()
    assert res["corpus"] == spec and res["corpus_sha256"] == load_corpus(spec, text_field="content").sha256
    assert load_corpus(spec, text_field="content").data == want and res["final_val_bpb"] > 0


def test_hub_split_and_streaming_with_max_bytes(hub_dir):
    spec = f"hub:{hub_dir}"
    c = load_corpus(spec, text_field="content", split="test")
    assert c.data == b"test row one\ntest row two" and c.source == f"{spec}[test]"
    full = load_corpus(spec, text_field="content").data
    assert full == ("alpha " * 50 + "\n" + "beta " * 50 + "\ngamma").encode()
    streamed = load_corpus(spec, text_field="content", streaming=True, max_bytes=310)
    assert streamed.data == full[:310]  # the stream stops at max_bytes, same bytes as the download
    assert load_corpus(spec, text_field="content", max_bytes=7).data == full[:7]


@pytest.mark.parametrize("kwargs,match", [
    ({"split": "dev"}, r"^data\.split: hub dataset .* has no split 'dev'"),
    ({"split": "dev", "streaming": True, "max_bytes": 100}, r"^data\.split: hub dataset .* has no split 'dev'"),
    ({"text_field": "body"}, r"^data\.text_field: must name a column of the dataset \(columns: \['content'\]\)"),
    ({"text_field": "body", "streaming": True, "max_bytes": 100}, r"^data\.text_field: must name a column"),
])
def test_hub_errors_name_the_field(hub_dir, kwargs, match):
    kwargs.setdefault("text_field", "content")
    with pytest.raises(ConfigError, match=match):
        load_corpus(f"hub:{hub_dir}", **kwargs)


def test_revision_is_handed_to_datasets_and_a_missing_one_is_named(monkeypatch, hub_dir):
    import datasets

    seen = {}

    class RevisionNotFoundError(Exception):
        pass

    def fake_load(name, config=None, **kw):
        seen.update(kw, name=name)
        raise RevisionNotFoundError(f"Revision '{kw['revision']}' does not exist for dataset {name}")

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    with pytest.raises(ConfigError, match=r"^data\.revision: hub dataset .* has no revision 'v9'"):
        hf.load_hub_bytes(str(hub_dir), None, "content", None, split="train", revision="v9")
    assert seen["revision"] == "v9" and seen["split"] == "train" and seen["streaming"] is False


@pytest.mark.parametrize("overrides,match", [
    ({"data.split": "validation"}, r"^data\.split: only a hub: corpus has splits"),
    ({"data.revision": "abc123"}, r"^data\.revision: only a hub: corpus has revisions"),
    ({"data.streaming": True}, r"^data\.streaming: only a hub: corpus can be streamed"),
    ({"data.corpus": "hub:x", "data.streaming": True}, r"^data\.streaming: needs data\.max_bytes > 0"),
    ({"data.max_bytes": -1}, r"^data\.max_bytes: must be >= 0"),
    ({"data.text_field": ""}, r"^data\.text_field: must name a column"),
])
def test_data_options_are_validated_with_the_config(overrides, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(get_preset("baseline", "smoke"), overrides)
    assert DataConfig(corpus="hub:x", split="validation", revision="v1", streaming=True, max_bytes=10).split == \
        "validation"


def test_max_bytes_cuts_a_registered_corpus_and_records_what_was_used():
    full = load_corpus("shakespeare")
    c = load_corpus("shakespeare", max_bytes=1000)
    assert c.data == full.data[:1000] and c.sha256 != full.sha256 and "first 1000 bytes" in c.source


def test_remote_code_is_never_trusted(monkeypatch, tmp_path, hub_dir):
    """Every datasets.load_dataset call passes trust_remote_code=False, and the pin admits no datasets release where
    a loading script would run by default (< 3.0)."""
    import datasets

    calls = []

    def fake_load(*a, **kw):
        calls.append(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    (tmp_path / "a.txt").write_text("x")
    for load in (lambda: hf.load_hub_bytes(str(hub_dir), None, "content", None),
                 lambda: hf.load_files_bytes([str(tmp_path / "a.txt")], "text", None),
                 lambda: hf.load_files_bytes([str(tmp_path / "a.parquet")], "text", None)):
        with pytest.raises(ConfigError):
            load()
    assert len(calls) == 3 and all(kw.get("trust_remote_code") is False for kw in calls)
    import re
    from pathlib import Path
    pin = re.search(r'"datasets>=([\d.]+)"', (Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pin and tuple(int(x) for x in pin.group(1).split(".")[:2]) >= (3, 0)
