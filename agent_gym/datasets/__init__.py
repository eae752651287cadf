"""Multi-hop QA datasets: typed task records, loaders for the official formats, answer metrics.

Example:
    >>> from agent_gym.datasets import load_embedded
    >>> tasks = load_embedded("hotpotqa", split="train")
    >>> len(tasks), tasks[0].source
    (24, 'hotpotqa')
"""

from agent_gym.datasets.embedded import EMBEDDED_FILES, Split, embedded_path, load_embedded, select_split
from agent_gym.datasets.folders import DATA_SUFFIXES, file_group, select_data_files
from agent_gym.datasets.loaders import Layout, Source, detect_layout, iter_records, load_qa, parse_record
from agent_gym.datasets.metrics import exact_match, f1_score, normalize_answer, score_answer, substring_match
from agent_gym.datasets.records import DatasetFormatError, Paragraph, QATask, SubQuestion

__all__ = [
    "DATA_SUFFIXES",
    "EMBEDDED_FILES",
    "DatasetFormatError",
    "Layout",
    "Paragraph",
    "QATask",
    "Source",
    "Split",
    "SubQuestion",
    "detect_layout",
    "embedded_path",
    "exact_match",
    "f1_score",
    "file_group",
    "iter_records",
    "load_embedded",
    "load_qa",
    "normalize_answer",
    "parse_record",
    "score_answer",
    "select_data_files",
    "select_split",
    "substring_match",
]
