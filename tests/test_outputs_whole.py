"""A run folder is either a finished run or visibly not one: result.json is written last, temporaries of killed writes
are swept (only those whose writer is gone), and ``sample`` checks a model file's claims before building anything."""
from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys

import pytest
import torch

from islands_kit import io as kit_io
from islands_kit.cli import main
from islands_kit.config import ConfigError, ModelConfig, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.io import atomic_write_bytes, sweep_stale_temporaries
from islands_kit.model import ByteTransformer
from islands_kit.run import LINK_TIMELINE, run_experiment
from islands_kit.train import preflight as pf
from islands_kit.train import sampling
from islands_kit.train.seal import seal


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")


def _cfg(steps: int = 3):
    return apply_overrides(get_preset("two_site", "smoke"), {"steps": str(steps)})


def test_result_json_is_the_last_output_written(tmp_path, monkeypatch):
    order: list[str] = []
    plain = os.replace

    def replace(src, dst, *a, **kw):  # type: ignore[no-untyped-def]
        order.append(os.path.basename(str(dst)))
        return plain(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    run_experiment(_cfg(), tmp_path)
    assert order[-1] == "result.json" and order.count("result.json") == 1
    assert {"model.pt", "model.island0.pt", "model.island1.pt", "history.jsonl", LINK_TIMELINE} <= set(order[:-1])


@pytest.mark.slow
def test_a_run_stopped_before_its_end_leaves_no_result_json(tmp_path, monkeypatch):
    def killed(*a, **kw):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt("stopped while writing the final weights")

    monkeypatch.setattr(sampling, "save_final_models", killed)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_cfg(), tmp_path)
    assert not (tmp_path / "result.json").exists()
    monkeypatch.undo()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    # not a finished run: a re-run into the same folder needs no --force
    assert main(["run", "two_site", "--set", "steps=3", "--out", str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / "result.json").exists() and (tmp_path / "model.pt").exists()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _tmp_name(target: str, pid: int, host: str | None = None) -> str:
    return f"{target}.{pid}@{host or kit_io._HOST}.ab12cd34{kit_io._TMP_SUFFIX}"


def test_stale_temporaries_are_swept_and_live_or_foreign_ones_kept(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    stale = tmp_path / _tmp_name("checkpoint.pt", dead)
    kept = [tmp_path / _tmp_name("checkpoint.pt", live),  # its writer still runs
            tmp_path / _tmp_name("checkpoint.pt", dead, "another-host"),  # cannot tell: another machine's process
            tmp_path / "checkpoint.pt.ab12cd34.tmp",  # not named by the kit's writer
            tmp_path / "notes.tmp"]
    for f in [stale, *kept]:
        f.write_bytes(b"\0" * 1024)
    assert sweep_stale_temporaries(tmp_path) == [stale]
    assert all(f.exists() for f in kept) and not stale.exists()


def test_a_write_sweeps_its_own_targets_temporaries(tmp_path):
    dead = _dead_pid()
    mine, other = tmp_path / _tmp_name("result.json", dead), tmp_path / _tmp_name("history.jsonl", dead)
    mine.write_bytes(b"x")
    other.write_bytes(b"x")
    atomic_write_bytes(tmp_path / "result.json", b"{}")
    assert not mine.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["result.json", other.name])


def test_a_run_sweeps_its_folder_when_it_starts(tmp_path):
    stale = tmp_path / _tmp_name("checkpoint.pt", _dead_pid())
    stale.write_bytes(b"\0" * 2048)
    run_experiment(_cfg(2), tmp_path)
    assert not stale.exists() and not list(tmp_path.glob("*.tmp"))


# ---- sample: the file's claims are checked before the model is built ---------------------------------------------


def _model_file(folder, model_cfg: ModelConfig, state=None, finished: bool = True):
    folder.mkdir(parents=True, exist_ok=True)
    state = ByteTransformer(model_cfg).state_dict() if state is None else state
    payload = {"format": sampling.FORMAT, "which": "deployed", "experiment": "two_site", "step": 1,
               "model_config": dataclasses.asdict(model_cfg), "state_dict": state}
    buf = io.BytesIO()
    torch.save(seal(payload), buf)  # a crafted file with a matching content hash: the checks behind it must hold
    (folder / sampling.DEPLOYED).write_bytes(buf.getvalue())
    if finished:
        (folder / "result.json").write_text("{}")
    return folder


SMALL = get_preset("two_site", "smoke").model


def test_sample_loads_a_consistent_file(tmp_path):
    model, meta = sampling.load_model(_model_file(tmp_path / "ok", SMALL))
    assert meta["step"] == 1 and model.cfg == SMALL


def test_sample_refuses_a_huge_claimed_model_before_building_it(tmp_path, monkeypatch):
    built: list[ModelConfig] = []
    plain_init = ByteTransformer.__init__

    def spy(self, cfg):  # type: ignore[no-untyped-def]
        if torch.empty(0).device.type != "meta":  # a real build (not the meta-device count): tens of GB
            built.append(cfg)
            raise AssertionError("the claimed model was built before its config was checked")
        plain_init(self, cfg)

    small_state = ByteTransformer(SMALL).state_dict()
    huge = dataclasses.replace(SMALL, d_model=8192, n_heads=64, n_layers=64)
    d = _model_file(tmp_path / "huge", huge, state=small_state)
    monkeypatch.setattr(ByteTransformer, "__init__", spy)
    monkeypatch.setattr(pf, "available_memory", lambda device: 8 << 30)
    with pytest.raises(ConfigError, match=r"^sample: .*model\.pt: model\.(d_model|n_layers): .* GB free on cpu"):
        sampling.load_model(d)
    monkeypatch.setattr(pf, "available_memory", lambda device: 1 << 50)  # memory enough: the tensors still disagree
    with pytest.raises(ConfigError, match=r"^sample: .*model\.pt: tensor tok_emb\.weight has shape \(256, \d+\), "
                                          r"the config makes \(256, 8192\)"):
        sampling.load_model(d)
    assert built == []


def test_sample_refuses_bad_configs_and_tensors(tmp_path):
    d = _model_file(tmp_path / "a", SMALL)
    payload = torch.load(d / "model.pt", weights_only=True)
    for name, change, pattern in [
        ("unknown", lambda p: p["model_config"].update(colour=1), r"model\.colour: unknown key"),
        ("range", lambda p: p["model_config"].update(d_model=-8), r"model\.d_model: must be an integer >= 1"),
        ("missing", lambda p: p["state_dict"].pop("lm_head.weight"), r"tensor lm_head\.weight is missing"),
        ("extra", lambda p: p["state_dict"].update(evil=torch.zeros(1)), r"tensor evil is not part of the model"),
    ]:
        p = {**payload, "model_config": dict(payload["model_config"]), "state_dict": dict(payload["state_dict"])}
        change(p)
        folder = tmp_path / name
        folder.mkdir()
        torch.save(seal(p), folder / "model.pt")
        (folder / "result.json").write_text("{}")
        with pytest.raises(ConfigError, match=r"^sample: .*" + pattern):
            sampling.load_model(folder)


def test_sample_refuses_an_edited_model_file(tmp_path):
    d = _model_file(tmp_path / "e", SMALL)
    payload = torch.load(d / "model.pt", weights_only=True)
    payload["state_dict"]["lm_head.weight"].view(-1)[0] += 1.0  # an edit after the run wrote it: not resealed
    torch.save(payload, d / "model.pt")
    with pytest.raises(ConfigError, match=r"^sample: .*model\.pt: its content does not match the content hash"):
        sampling.load_model(d)


def test_sample_refuses_absurd_sizes_nan_and_sparse_weights_in_one_line(tmp_path):
    """seq_len 10**12 sized an 8 TB table, 10**5 layers took minutes before any verdict, NaN or sparse weights gave
    tracebacks: each is one line naming the field or tensor (the files carry a matching content hash)."""
    state = ByteTransformer(SMALL).state_dict()
    nan = {**state, "lm_head.weight": torch.full_like(state["lm_head.weight"], float("nan"))}
    sparse = {**state, "lm_head.weight": state["lm_head.weight"].to_sparse()}  # refused by the hash's walk already
    for name, cfg, st, pattern in [
        ("long", {"seq_len": 10**12}, state, r"model\.seq_len: must be <= 1048576"),
        ("deep", {"n_layers": 10**5}, state, r"model\.n_layers: must be <= 1024"),
        ("nan", {}, nan, r"tensor lm_head\.weight holds values that are not finite"),
        ("sparse", {}, sparse, r"holds a torch\.sparse_coo tensor of shape \(256, 32\)"),
    ]:
        d = tmp_path / name
        d.mkdir()
        payload = {"format": sampling.FORMAT, "which": "deployed", "experiment": "two_site", "step": 1,
                   "model_config": {**dataclasses.asdict(SMALL), **cfg}, "state_dict": st}
        torch.save(seal(payload) if name != "sparse" else {**payload, "content_blake2b": "0" * 64}, d / "model.pt")
        (d / "result.json").write_text("{}")
        with pytest.raises(ConfigError, match=r"^sample: .*" + pattern) as e:
            sampling.load_model(d)
        assert "\n" not in str(e.value)


def test_sample_refuses_an_unfinished_run(tmp_path):
    d = _model_file(tmp_path / "u", SMALL, finished=False)
    with pytest.raises(ConfigError, match=r"is not a finished run \(no result\.json"):
        sampling.load_model(d)


@pytest.mark.parametrize("name, crafted, pattern", [
    # 2^28 float32 elements read from one stored zero: hashing it took 31 s and 1 GiB, larger ones ran out of memory
    ("expanded", lambda: torch.zeros(1).expand(2 ** 28), r"holds an expanded tensor of shape \(268435456,\)"),
    ("overlapping", lambda: torch.zeros(2 ** 15).as_strided((2 ** 14, 2 ** 14), (1, 1)),  # 2^28 again, no zero
     r"holds a tensor of shape \(16384, 16384\) and strides \(1, 1\) that its storage of 131072 bytes cannot hold"),
    ("repeated", lambda: [base[i:] for base in [torch.ones(2 ** 17)] for i in range(64)],  # 512 KiB read 64 times
     r"holds tensors that read as \d+ bytes from \d+ bytes of storage \(more than 4x"),
])
def test_a_crafted_file_is_refused_before_its_tensors_are_read(tmp_path, name, crafted, pattern):
    """The content hash reads every tensor's bytes: each tensor's claimed shape is held against its storage, and all
    of them against the storage the file holds, before one byte is read — in one line, whatever the hash says."""
    import time

    state = {**ByteTransformer(SMALL).state_dict(), "evil": crafted()}
    d = tmp_path / name
    d.mkdir()
    payload = {"format": sampling.FORMAT, "which": "deployed", "experiment": "two_site", "step": 1,
               "model_config": dataclasses.asdict(SMALL), "state_dict": state, "content_blake2b": "0" * 64}
    torch.save(payload, d / "model.pt")
    (d / "result.json").write_text("{}")
    assert (d / "model.pt").stat().st_size < 2 << 20  # a small file: what it claims is what costs
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"^sample: .*model\.pt: " + pattern) as e:
        sampling.load_model(d)
    assert time.perf_counter() - t0 < 2.0 and "\n" not in str(e.value)



# ---- one run per folder, and a full disk --------------------------------------------------------------------------

def test_a_second_run_into_a_held_folder_is_refused_and_a_stale_lock_is_taken_over(tmp_path):
    """Two runs with the same --out used to overwrite each other (the second passed the finished-run check while the
    first was still training). The folder's lock refuses the second, naming the folder and the holder; a lock left
    by a process that is gone, or whose pid now names another process, is stale and taken over."""
    import json

    from islands_kit.records import locks

    out = tmp_path / "run"
    lock = out / locks.LOCK_FILE
    with locks.folder_lock(out):
        assert out.is_dir() and locks.lock_owner(out) == f"process {os.getpid()} on {locks._HOST}"
        with pytest.raises(ConfigError, match=rf"^--out: {out} is in use by another run \(process {os.getpid()} on "):
            run_experiment(_cfg(2), out)
    assert not out.exists()  # created for the lock, left empty: removed again
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for pid, started in ((int(dead.stdout), None),  # its process is gone
                         (os.getpid(), "1")):  # this pid, but a process that started at another time
        lock.write_text(json.dumps({"pid": pid, "host": locks._HOST, "started": started}))
        assert locks.lock_owner(out) is None
        run_experiment(_cfg(2), out)
        assert (out / "result.json").exists() and not lock.exists()
    lock.write_text(json.dumps({"pid": 4242, "host": "another-host"}))  # another host: cannot tell, so it holds
    assert locks.lock_owner(out) == "process 4242 on another-host"


@pytest.mark.slow
def test_two_processes_with_the_same_out(tmp_path, capsys):
    """A second process asked for a folder another live process holds is refused at once, by the dry run too."""
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom islands_kit.records.locks import folder_lock\n"
                               f"with folder_lock({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for extra in ([], ["--dry-run"]):
            assert main(["run", "two_site", "--set", "steps=2", "--out", str(out), *extra]) == 2
            err = capsys.readouterr().err
            assert f"--out: {out} is in use by another run (process {holder.pid} on" in err, err
    finally:
        holder.kill()
        holder.wait()
    assert main(["run", "two_site", "--set", "steps=2", "--out", str(out)]) == 0  # its holder gone: stale, taken


def test_a_full_disk_is_a_kit_error_naming_the_file_and_nothing_finished_is_lost(tmp_path, monkeypatch, capsys):
    """ENOSPC while the outputs are written ended in a raw OSError. It is one line naming the file, the run's
    figures go into it (its training is done), and the finished run already in the folder stays whole."""
    import errno

    out = tmp_path / "run"
    assert main(["run", "two_site", "--set", "steps=2", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["run", "two_site", "--set", "steps=2", "--out", str(out), "--force"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"islands-kit: error: cannot write {out / 'model.island0.pt'}")
    assert "No space left on device (free some space: df -h" in err and "nothing half-written is left" in err
    assert "The run itself finished (final_val_bpb " in err and "holds no result.json" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier run, byte for byte
    with pytest.raises(kit_io.OutputError, match=r"cannot write .*x\.json \(3 bytes\): No space left on device"):
        atomic_write_bytes(tmp_path / "x.json", b"abc")
    assert list(tmp_path.glob("x.json*")) == []
