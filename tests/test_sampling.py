"""The final models a run leaves (every island's replica and the deployed model, readable with weights_only=True) and
``islands-kit sample``: the deployed model is the one that was scored, and sampling follows its logits."""
from __future__ import annotations

import json

import pytest
import torch

from islands_kit import cli
from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.train.metrics import evaluate_bpb
from islands_kit.train.sampling import DEPLOYED, generate, island_file, load_model


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def two_site_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample") / "ts"
    # alpha blending, so that the replicas still differ from each other after the final flush (with the preset's
    # keep_local merge they all equal the global model at the end)
    assert cli.main(["run", "two_site", "--set", "steps=8", "--set", "sync.diloco.merge=alpha",
                     "--set", "sync.diloco.alpha=0.5", "--out", str(out)]) == 0
    return out


def test_run_saves_every_replica_and_the_deployed_model(two_site_run):
    res = json.loads((two_site_run / "result.json").read_text())
    files = [DEPLOYED] + [island_file(i) for i in range(res["n_islands"])]
    payloads = {f: torch.load(two_site_run / f, map_location="cpu", weights_only=True) for f in files}
    for p in payloads.values():
        assert p["format"] == "islands_kit.model/2" and p["step"] == 8 and p["experiment"] == "two_site"
        assert p["model_config"] == res["config"]["model"]
    a, b, g = (payloads[f]["state_dict"] for f in (island_file(0), island_file(1), DEPLOYED))
    assert a.keys() == g.keys() and any(not torch.equal(a[k], b[k]) for k in a)  # replicas differ (DiLoCo)
    # the deployed model is the one scored: it reproduces final_val_bpb exactly on the run's final windows
    from islands_kit.run import Experiment

    exp = Experiment(ExperimentConfig.from_dict(res["config"]))
    model, meta = load_model(two_site_run)
    assert meta["which"] == "deployed"
    bpb = evaluate_bpb(lambda xb: model(xb).logits, *exp.evaluator.final_windows, batch_size=64)
    assert bpb == res["final_val_bpb"]


def test_baseline_replicas_are_the_deployed_model(tmp_path):
    assert cli.main(["run", "baseline", "--set", "steps=3", "--out", str(tmp_path)]) == 0
    g = torch.load(tmp_path / DEPLOYED, weights_only=True)["state_dict"]
    for i in range(2):
        s = torch.load(tmp_path / island_file(i), weights_only=True)["state_dict"]
        assert all(torch.equal(s[k], g[k]) for k in g)


@pytest.mark.slow
def test_generate_follows_the_logits(two_site_run):
    model, _ = load_model(two_site_run)
    prompt = b"ROMEO:"
    greedy = generate(model, prompt, max_bytes=12, temperature=0)
    seq = list(prompt)  # reference: argmax of the full forward pass, one byte at a time
    for _ in range(12):
        seq.append(int(model(torch.tensor([seq[-model.cfg.seq_len:]])).logits[0, -1].argmax()))
    assert greedy == bytes(seq[len(prompt):])
    assert generate(model, prompt, max_bytes=12, temperature=0.7, top_k=1, seed=3) == greedy  # top-1 = greedy
    s1 = generate(model, prompt, max_bytes=64, seed=1)
    assert len(s1) == 64 and s1 == generate(model, prompt, max_bytes=64, seed=1)
    assert s1 != generate(model, prompt, max_bytes=64, seed=2)
    long = generate(model, b"x" * 100, max_bytes=4, temperature=0)  # longer than seq_len: the last seq_len bytes
    assert long == generate(model, b"x" * model.cfg.seq_len, max_bytes=4, temperature=0)
    for kw, field in (({"temperature": -1.0}, "temperature"), ({"top_k": 300}, "top_k"),
                      ({"max_bytes": 0}, "max_bytes")):
        with pytest.raises(ConfigError, match=f"^{field}:"):
            generate(model, prompt, **kw)


def test_sample_command(two_site_run, tmp_path, capsys):
    assert cli.main(["sample", str(two_site_run), "--prompt", "ROMEO:", "--max-bytes", "20", "--seed", "4",
                     "--top-k", "5", "--temperature", "0.8"]) == 0
    cap = capsys.readouterr()
    model, _ = load_model(two_site_run)
    want = b"ROMEO:" + generate(model, b"ROMEO:", max_bytes=20, temperature=0.8, top_k=5, seed=4)
    assert cap.out == want.decode("utf-8", "replace") + "\n"
    assert "deployed model of two_site after step 8" in cap.err
    assert cli.main(["sample", str(two_site_run), "--island", "1", "--max-bytes", "3"]) == 0
    capsys.readouterr()
    assert cli.main(["sample", str(tmp_path), "--prompt", "x"]) == 2
    assert "sample: no model.pt in" in capsys.readouterr().err
    (tmp_path / DEPLOYED).write_bytes(b"not a torch file")
    assert cli.main(["sample", str(tmp_path)]) == 2
    assert "is not a finished run (no result.json" in capsys.readouterr().err
    (tmp_path / "result.json").write_text("{}")
    assert cli.main(["sample", str(tmp_path)]) == 2
    assert "is not a model file" in capsys.readouterr().err
