"""``python -m agentlab.bench`` (see :mod:`agentlab.bench.cli`)."""

import os
import sys

from agentlab.bench.cli import main

status = main()
if status == 130:
    # Interrupted: every finished case is committed and the results file is closed. Shutting the
    # embedded llama.cpp server down would first finish the generation in flight (a minute or more
    # on 2 cores), so the process leaves without joining it.
    embedded = sys.modules.get("agentlab.model.embedded")
    shared = getattr(getattr(embedded, "EmbeddedServer", None), "_shared", None)
    if shared is not None and shared.running:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
raise SystemExit(status)
