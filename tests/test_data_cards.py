"""The data cards are Hugging Face dataset cards: ``huggingface_hub``'s card parser reads their metadata (license,
language, task categories, size category, pretty name) beside the kit's own sha256 / bytes / splits, and the wheel's
copy is the one the kit finds (``islands_kit.resources``)."""
from __future__ import annotations

import re

import pytest
from huggingface_hub import DatasetCard, DatasetCardData

from islands_kit.data import CORPORA
from islands_kit.resources import data_card_path

SIZE_BOUNDS = {"n<1K": (0, 1e3), "1K<n<10K": (1e3, 1e4), "10K<n<100K": (1e4, 1e5), "100K<n<1M": (1e5, 1e6),
               "1M<n<10M": (1e6, 1e7), "10M<n<100M": (1e7, 1e8), "100M<n<1B": (1e8, 1e9)}


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_data_card_parses_as_a_hugging_face_dataset_card(name):
    card = DatasetCard(data_card_path(name).read_text())
    data = card.data
    assert isinstance(data, DatasetCardData)
    src = CORPORA[name]
    assert data.pretty_name and name in data.pretty_name.lower()
    assert data.language == ["en"] and data.task_categories == ["text-generation"]
    # a Hub license id (lower-case, no spaces); "other" must say which licence it is
    assert re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", data.license), data.license
    if data.license == "other":
        assert data.to_dict().get("license_name")
    extra = data.to_dict()
    assert (extra["license_details"], extra["bytes"], extra["sha256"]) == (src.license, src.bytes, src.sha256)
    (size,) = data.size_categories
    lo, hi = SIZE_BOUNDS[size]
    assert lo <= src.bytes < hi  # n counts bytes
    assert "val_fraction" in extra["splits"]
    assert card.text.lstrip().startswith(f"# {name}")
