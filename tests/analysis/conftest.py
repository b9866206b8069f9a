"""Fixtures of the analysis tests (data builders in analysis_data.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from analysis_data import small_rows, study_rows

from moesim.analysis.results import as_table


@pytest.fixture(scope="session")
def study_table() -> pa.Table:
    return as_table(study_rows())


@pytest.fixture()
def small_table() -> pa.Table:
    return as_table(small_rows(extra_unmatched=False))
