"""The results store: the DuckDB tables of runs, cases, calls, retention, trajectories and retrieval."""
