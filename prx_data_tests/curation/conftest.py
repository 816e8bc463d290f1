# fold and dedup tests (moved from export/) read MDS streams: clean streaming's shared memory
# around each test, as export/conftest.py does.
from prx_data_tests.export.conftest import _clean_shm  # noqa: F401
