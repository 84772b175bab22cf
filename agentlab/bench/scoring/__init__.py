"""Scoring a run: the metrics, the judge, the statistics, and the queries that pair runs for the tables."""
