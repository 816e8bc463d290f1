"""The only place prx_data touches what a library does not promise to keep.

One module per library. Each names the version its code was written against
(``WRITTEN_FOR``), and ``prx_data_tests/compat`` holds a test per module that fails, with what
to re-check, when the installed version differs or the behaviour relied on changes. Everything
outside this package uses public APIs only.
"""
