"""``python -m agentlab.bench`` (see :mod:`agentlab.bench.cli`)."""

from agentlab.bench.cli import main

raise SystemExit(main())
