"""The command line of ``python -m agentlab.bench``: its parsers, its commands and its one-line errors.

The only layer that knows :class:`~agentlab.bench.cli.common.CliError`; nothing else under
``agentlab.bench`` imports this package (``__main__`` calls :func:`agentlab.bench.cli.main.main`).
"""
