"""Data sets: loading and seeded train/val/test splits.

Built-in data sets (LIAR, GSM8K, BIG-Bench Hard; builtin.py) are read from a data folder that is never part of
the repository; user data sets are .jsonl/.csv/.tsv/.parquet/.arrow files (files.py, reading.py, tables.py), or a
Hugging Face folder (one `datasets.save_to_disk` wrote, or a hub snapshot's files named by split; folders.py),
whose splits it keeps. loading.py reads any of them by name; splitting.py draws the splits. Every problem with the
data surfaces as a :class:`DataError` whose message is meant for the user, so the CLI can print it instead of a
traceback. What the other stages use is named here.
"""

from .builtin import DATA_DIR_ENV, anchor_data_dir, data_dirs
from .dataset import DataError, Dataset, Sample, Splits, as_text, bad_samples
from .files import answer_key, fields_of, first_rows, from_records, head_of
from .loading import fingerprint, load
from .splitting import EVAL_TEST_SIZE, eval_splits, fit_defaults, make_splits

__all__ = [
    "DATA_DIR_ENV",
    "EVAL_TEST_SIZE",
    "DataError",
    "Dataset",
    "Sample",
    "Splits",
    "anchor_data_dir",
    "answer_key",
    "as_text",
    "bad_samples",
    "data_dirs",
    "eval_splits",
    "fields_of",
    "fingerprint",
    "first_rows",
    "fit_defaults",
    "head_of",
    "from_records",
    "load",
    "make_splits",
]
