"""One loader per benchmark, all resolving and verifying files through :mod:`.base`.

Each loader returns typed frozen dataclasses and the sha256 fingerprint of the files it read
(stored with every run). Data files are found in ``$AGENTLAB_DATA_DIR/<name>/``, then
``data/cache/<name>/``, then downloaded from the URL pinned in ``data/manifest.toml``.
"""

from agentlab.bench.datasets.base import DatasetError, load_manifest, resolve_file
from agentlab.bench.datasets.locomo import LoCoMoData, load_locomo
from agentlab.bench.datasets.longmemeval import LongMemEvalData, load_longmemeval, write_longmemeval_fixture
from agentlab.bench.datasets.mtbench101 import MTBench101Data, load_mtbench101
from agentlab.bench.datasets.qmsum import QMSumCase, QMSumData, load_qmsum, select_cases

__all__ = [
    "DatasetError",
    "LoCoMoData",
    "LongMemEvalData",
    "MTBench101Data",
    "QMSumCase",
    "QMSumData",
    "load_locomo",
    "load_longmemeval",
    "load_manifest",
    "load_mtbench101",
    "load_qmsum",
    "resolve_file",
    "select_cases",
    "write_longmemeval_fixture",
]
