"""PostgreSQL and moto S3 for the security tests; the session Ray head of the root conftest stays
(the Dagster runs here connect to it, as the pipeline tests do)."""

from prx_data_tests.deploy.conftest import postgres_admin_url, postgres_url  # noqa: F401 (fixtures)
