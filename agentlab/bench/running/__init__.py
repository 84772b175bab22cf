"""Running a benchmark: the executor, its distributed and remote variants, one case, and a run's identity."""
