"""``python -m agentlab.bench`` (see :mod:`agentlab.bench.cli.main`); ends without the interpreter's teardown
once everything is stored (:mod:`agentlab.bench.running.process_exit`).
"""

from agentlab.bench.cli.main import main
from agentlab.bench.running.process_exit import finish

finish(main())
