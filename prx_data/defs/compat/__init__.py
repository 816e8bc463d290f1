"""Adapters of Dagster's and dagster-ray's private APIs: the only modules of ``prx_data.defs``
that touch what those libraries do not promise to keep.

They live under ``defs/`` and not in ``prx_data/compat/`` because only ``prx_data.defs`` imports
Dagster (``dagster-only-in-defs``): ``prx_data/compat/`` sits below every plain package, which
Ray workers import without Dagster. The rules are those of ``prx_data/compat/``: one module per
library, each naming the version its code was written against (``WRITTEN_FOR``), and a test in
``prx_data_tests/compat/`` that fails, saying what to re-check, when the installed version
differs or the behaviour relied on changes (contract ``private-apis-in-compat``).
"""
