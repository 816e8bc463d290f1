"""Run a per-row stage over a source's Lance table: pick the rows that need work, process them
(in-process or on Ray), stage results as they finish, merge them into the table as columns."""
