"""LoCoMo retrieval: the published retrieval protocol, its retrievers and their tuning."""
