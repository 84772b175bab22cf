"""``python -m agentlab.bench`` (see :mod:`agentlab.bench.cli`); ends without the interpreter's teardown
once everything is stored (:mod:`agentlab.bench.process_exit`).
"""

from agentlab.bench.cli import main
from agentlab.bench.process_exit import finish

finish(main())
