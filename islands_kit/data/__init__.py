"""Data: byte corpora (``corpora.py``, with the Hugging Face loaders in ``hf.py``) and the split, batch streams and
evaluation windows (``streams.py``). ``from islands_kit.data import ...`` gives the public names of both."""
from islands_kit.data.corpora import CORPORA, Corpus, CorpusSource, check_corpus_spec, load_corpus, load_data_corpus, local_corpus_files
from islands_kit.data.streams import BatchStream, eval_windows, split_bytes
from islands_kit.io import atomic_write_bytes, cache_root  # re-exported for callers that predate islands_kit.io

__all__ = ["CORPORA", "BatchStream", "Corpus", "CorpusSource", "atomic_write_bytes", "cache_root", "check_corpus_spec",
           "eval_windows", "load_corpus", "load_data_corpus", "local_corpus_files", "split_bytes"]
