"""The data section (``data.*``): corpus, splits and how many validation bytes are scored."""
from __future__ import annotations

from dataclasses import dataclass

from islands_kit.rules import _check, _check_fields


@dataclass
class DataConfig:
    corpus: str = "shakespeare"  # shakespeare | enwiki | hub:<name>[:config] | path to .txt/.parquet files
    val_fraction: float = 0.05  # the last val_fraction of the bytes are validation
    eval_bytes: int = 65536  # validation bytes scored at each evaluation (a fixed, evenly spaced sample); 0 = all
    final_eval_bytes: int = 0  # validation bytes scored for final_val_bpb; 0 = all of them (demo, gpu)
    text_field: str = "text"  # the text column of a hub: or .parquet corpus (e.g. content)
    split: str = "train"  # hub: the split to read (train, validation, train[:10%], ...)
    revision: str = ""  # hub: the dataset revision to pin (commit sha, tag or branch); "" = the default branch
    streaming: bool = False  # hub: stream the rows instead of downloading the dataset; needs max_bytes
    max_bytes: int = 0  # use only the first max_bytes bytes of the corpus (0 = all)
    # the tuning split: held out of training; hyperparameters are chosen on its score (final_tune_bpb) when a tuner
    # (benchmarks/studies/protocol-demo.toml) asks for it with score_tune; otherwise the final evaluation spares that pass
    tune_fraction: float = 0.0  # fraction of the bytes just before the validation tail held out for tuning (0 = none)
    score_tune: bool = False  # score the tuning split at the end (final_tune_bpb); off: held out, never scored

    def __post_init__(self) -> None:
        _check_fields(self, "data.")
        _check(0.05 <= self.val_fraction < 0.5, "data.val_fraction", "must be in [0.05, 0.5)", self.val_fraction)
        _check(self.eval_bytes >= 0, "data.eval_bytes", "must be >= 0 (0 = all validation bytes)", self.eval_bytes)
        _check(0.0 <= self.tune_fraction < 0.5, "data.tune_fraction", "must be in [0, 0.5)", self.tune_fraction)
        _check(not self.score_tune or self.tune_fraction > 0, "data.score_tune",
               "needs a tuning split to score (data.tune_fraction > 0)", self.score_tune)
        _check(self.final_eval_bytes >= 0, "data.final_eval_bytes", "must be >= 0 (0 = all validation bytes)", self.final_eval_bytes)
        hub = isinstance(self.corpus, str) and self.corpus.startswith("hub:")
        _check(isinstance(self.text_field, str) and self.text_field.strip() != "", "data.text_field",
               "must name a column", self.text_field)
        _check(isinstance(self.split, str) and self.split.strip() != "", "data.split", "must name a split", self.split)
        _check(hub or self.split == "train", "data.split", "only a hub: corpus has splits (local files and the "
               "registered corpora are one train split)", self.split)
        _check(hub or self.revision == "", "data.revision", "only a hub: corpus has revisions", self.revision)
        _check(self.max_bytes >= 0, "data.max_bytes", "must be >= 0 (0 = all)", self.max_bytes)
        _check(not self.streaming or hub, "data.streaming", "only a hub: corpus can be streamed", self.streaming)
        _check(not self.streaming or self.max_bytes > 0, "data.streaming",
               "needs data.max_bytes > 0 (how much of the stream to read)", self.max_bytes)
