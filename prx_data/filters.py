"""Building Lance filter expressions safely (no dependencies: GPU workers import it too)."""


def sql_string(value: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"
