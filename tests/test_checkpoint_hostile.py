"""An inconsistent checkpoint is refused before anything is restored, with one line naming the entry: a missing key,
a wrong RNG state, a changed tensor shape, counters out of range (``step=-5``), nested state that does not fit."""
from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from islands_kit.cli import main
from islands_kit.config import ConfigError, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.run import run_experiment
from islands_kit.train.checkpoint import FILENAME
from islands_kit.train.seal import seal


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")


def _cfg():
    return apply_overrides(get_preset("two_site", "smoke"), {"steps": "4", "checkpoint_every": "2", "progress": "false"})


@pytest.fixture(scope="module")
def good_state(tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ck")
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "disabled")
    try:
        run_experiment(_cfg(), out)
    finally:
        mp.undo()
    return torch.load(out / FILENAME, map_location="cpu", weights_only=True)


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(s: dict[str, Any]) -> None:
        node = s
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return change


def _drop(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def change(s: dict[str, Any]) -> None:
        node = s
        for k in path[:-1]:
            node = node[k]
        del node[path[-1]]
    return change


CASES = [
    ("missing_strategy", _drop(["strategy"]), r"the checkpoint has no 'strategy' entry"),
    ("missing_rng", _drop(["torch_rng"]), r"the checkpoint has no 'torch_rng' entry"),
    ("short_rng", _set(["torch_rng"], torch.zeros(100, dtype=torch.uint8)),
     r"torch_rng must be a \(\d+,\) torch\.uint8 tensor \(torch's generator state; got \(100,\) torch\.uint8\)"),
    ("shape", _set(["islands", 0, "model", "tok_emb.weight"], torch.zeros(256, 7)),
     r"islands\.0\.model: tensor tok_emb\.weight has shape \(256, 7\), the config makes \(256, \d+\)"),
    ("missing_tensor", _drop(["islands", 1, "model", "lm_head.weight"]),
     r"islands\.1\.model: tensor lm_head\.weight is missing"),
    ("extra_tensor", _set(["islands", 0, "model", "evil"], torch.zeros(1)), r"tensor evil is not part of the model"),
    ("negative_step", _set(["step"], -5), r"step must be an integer in \[0, steps=4\) \(got -5\)"),
    ("step_past_end", _set(["step"], 10**6), r"step must be an integer in \[0, steps=4\)"),
    ("bool_step", _set(["step"], True), r"step must be an integer"),
    ("inner_steps", _set(["inner_steps"], {0: -1, 1: 2}), r"inner_steps must give each of the 2 islands"),
    ("elapsed", _set(["elapsed_s"], float("inf")), r"elapsed_s must be a finite number >= 0"),
    ("island_part", _drop(["islands", 0, "optimizer"]), r"islands\.0 has no 'optimizer' entry"),
    ("nested_strategy", _set(["strategy"], {}), r"the checkpoint's strategy does not fit this run \(KeyError"),
    ("sched_inf", _set(["islands", 0, "scheduler", "last_epoch"], float("inf")),
     r"islands\.0\.scheduler\.last_epoch must be an integer in \[0, steps \+ 1 = 5\] \(got inf\)"),
    ("sched_str", _set(["islands", 1, "scheduler", "last_epoch"], "abc"), r"islands\.1\.scheduler\.last_epoch must be"),
    ("sched_lambda", _set(["islands", 0, "scheduler", "lr_lambdas"], [{"x": 1}, None]),
     r"islands\.0\.scheduler\.lr_lambdas must be a list of nulls"),
    ("sched_lr", _set(["islands", 0, "scheduler", "base_lrs"], [float("nan"), 0.003]), r"base_lrs must be a list of finite"),
    ("inf_clock", _set(["transport", "clock", "now", 0], float("inf")),
     r"the checkpoint's transport clock\.now\[0\] must be a finite number of seconds >= 0 \(got inf\)"),
    ("nan_weight", _set(["islands", 0, "model", "lm_head.weight"], torch.full((256, 32), float("nan"))),
     r"islands\.0\.model: tensor lm_head\.weight holds values that are not finite"),
    ("nested_optimizer", _set(["islands", 0, "optimizer"], {"state": {}, "param_groups": []}),
     r"the checkpoint's islands\.0 does not fit this run \(ValueError"),
]


def _write(folder: Path, state: dict[str, Any]) -> Path:
    """A crafted checkpoint with a matching content hash (whoever edits a file can recompute it): the checks behind
    the hash must still refuse it."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(seal(state), folder / FILENAME)
    return folder


def _mutated(good: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    s = torch.load(_roundtrip(good), weights_only=True)  # a deep copy of plain data and tensors
    change(s)
    return s


def _roundtrip(state: dict[str, Any]) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("name, change, pattern", CASES, ids=[c[0] for c in CASES])
def test_inconsistent_checkpoint_is_one_line_naming_the_entry(tmp_path, good_state, name, change, pattern):
    ck = _write(tmp_path / "ck", _mutated(good_state, change))
    with pytest.raises(ConfigError) as e:
        run_experiment(_cfg(), tmp_path / "out", resume=ck)
    msg = str(e.value)
    assert msg.startswith("--resume: ") and "\n" not in msg, msg
    assert re.search(pattern, msg), msg
    assert not (tmp_path / "out").exists()  # refused before any output


def test_the_untouched_checkpoint_resumes(tmp_path, good_state):
    ck = _write(tmp_path / "ck", _mutated(good_state, lambda s: None))
    res = run_experiment(_cfg(), tmp_path / "out", resume=ck)
    assert res.steps == 4


def test_dry_run_checks_the_checkpoint_too(tmp_path, good_state, capsys):
    ck = _write(tmp_path / "ck", _mutated(good_state, _set(["step"], -5)))
    assert main(["run", "--resume", str(ck), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "--resume: the checkpoint's step must be an integer in [0, steps=4) (got -5)" in capsys.readouterr().err
    ck3 = _write(tmp_path / "ck3", _mutated(good_state, _set(["transport", "clock", "now", 0], float("inf"))))
    assert main(["run", "--resume", str(ck3), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "transport clock.now[0] must be a finite number of seconds >= 0" in capsys.readouterr().err
    ck2 = _write(tmp_path / "ck2", _mutated(good_state, _set(["islands", 0, "model", "tok_emb.weight"], torch.zeros(3))))
    assert main(["run", "--resume", str(ck2), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "tensor tok_emb.weight has shape (3,)" in capsys.readouterr().err


def test_an_edited_tensor_is_refused_by_the_content_hash(tmp_path, good_state, capsys):
    """One weight changed in place (shapes and every other entry intact) used to resume silently; the content hash
    written last with the checkpoint now refuses it, in the run and in the dry run alike."""
    edited = _mutated(good_state, lambda s: s["islands"][0]["model"]["tok_emb.weight"].view(-1)[7].add_(1e-3))
    folder = tmp_path / "ck"
    folder.mkdir()
    torch.save(edited, folder / FILENAME)  # not resealed: what an edit after the run leaves
    with pytest.raises(ConfigError, match=r"^--resume: .*checkpoint\.pt: its content does not match the content hash"):
        run_experiment(_cfg(), tmp_path / "out", resume=folder)
    assert main(["run", "--resume", str(folder), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "does not match the content hash" in capsys.readouterr().err
    unsealed = _mutated(good_state, lambda s: s.pop("content_blake2b"))
    torch.save(unsealed, folder / FILENAME)
    with pytest.raises(ConfigError, match=r"has no content hash"):
        run_experiment(_cfg(), tmp_path / "out", resume=folder)


def test_the_kits_checkpoint_reads_as_its_storage_and_an_expanded_one_is_refused(tmp_path, good_state):
    """What ``seal.MAX_INFLATION`` (4) leaves room for: the kit's own checkpoint reads as its storage, to 32 bytes of
    1.4 MB (a few small tensors kept under two names); one tensor expanded from a single stored value is refused in one line
    before the hash reads it (2^28 elements took 31 s and 1 GiB)."""
    from islands_kit.train.seal import _tensors

    tensors = _tensors(good_state, [])
    held = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())
    assert sum(t.numel() * t.element_size() for t in tensors) <= 1.001 * held
    crafted = _mutated(good_state, lambda s: s["islands"][0]["model"].update(
        {"tok_emb.weight": torch.zeros(1).expand(256, 2 ** 20)}))
    folder = tmp_path / "ck"
    folder.mkdir()
    torch.save(crafted, folder / FILENAME)
    with pytest.raises(ConfigError, match=r"^--resume: .*checkpoint\.pt: holds an expanded tensor of shape "
                                          r"\(256, 1048576\) .*; refused$"):
        run_experiment(_cfg(), tmp_path / "out", resume=folder)


_MEASURE = """
import resource, sys, time
from islands_kit.config import ConfigError
from islands_kit.train.checkpoint import load_checkpoint
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
try:
    load_checkpoint(sys.argv[1])
    print("loaded")
except ConfigError as e:
    print("refused:", e)
except BaseException as e:  # noqa: BLE001 - what the old code raised (MemoryError, RuntimeError)
    print("raised:", type(e).__name__)
print("grew_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, "s", time.perf_counter() - t0)
"""


def test_a_compressed_record_is_refused_unread_in_bounded_memory(tmp_path, good_state):
    """A record DEFLATE-compressed in the checkpoint's zip (torch.save writes none) inflates to whatever its header
    claims when read: 256 MiB of zeros in a file of well under a megabyte. It is refused from the zip's directory
    before torch reads a record, the process growing by less than twice the file's size."""
    import subprocess
    import sys
    import zipfile

    plain = tmp_path / "plain.pt"
    torch.save(good_state, plain)
    folder = tmp_path / "ck"
    folder.mkdir()
    with zipfile.ZipFile(plain) as src:
        names = src.namelist()
        big = max((n for n in names if "/data/" in n), key=lambda n: src.getinfo(n).file_size)
    # the same file, its largest record deflated and claiming 256 MiB
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(folder / FILENAME, "w") as dst:
        for n in names:
            if n != big:
                info = zipfile.ZipInfo(n)
                dst.writestr(info, src.read(n), compress_type=zipfile.ZIP_STORED)
        info = zipfile.ZipInfo(big)
        info.compress_type = zipfile.ZIP_DEFLATED
        with dst.open(info, "w", force_zip64=True) as f:
            zeros = bytes(1 << 20)
            for _ in range(256):
                f.write(zeros)
    size = (folder / FILENAME).stat().st_size
    assert size < 2 << 20
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(folder)], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}).stdout
    assert re.search(r"refused: --resume: .*checkpoint\.pt: record '.*' is compressed \([\d,]+ bytes claiming "
                     r"268,435,456\); the kit writes none, refused unread", out), out
    grew_kb = int(re.search(r"grew_kb (\d+)", out).group(1))
    assert grew_kb * 1024 < 2 * size, out


def test_a_checkpoint_nested_thousands_deep_is_one_line_not_a_recursion_error(tmp_path, good_state):
    import sys

    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50000)
    try:
        folder = tmp_path / "ck"
        folder.mkdir()
        torch.save({**good_state, "history": deep}, folder / FILENAME)
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(ConfigError, match=r"^--resume: .*checkpoint\.pt: nested deeper than 32 levels; the kit writes "
                                          r"none, refused$"):
        run_experiment(_cfg(), tmp_path / "out", resume=folder)
