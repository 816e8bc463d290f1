# The loader tests read the shared MDS tree of the export tests and clean streaming's shared memory
# around each test, as they did under export/.
from prx_data_tests.export.conftest import _clean_shm, base_tree, tree  # noqa: F401
