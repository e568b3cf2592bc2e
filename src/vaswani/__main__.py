"""``python -m vaswani`` (and ``torchrun -m vaswani``): the command line.

A process of a group of several (``WORLD_SIZE`` above 1: ``--nproc`` or torchrun) leaves with
``os._exit`` once its output is flushed. By then the command has written and synced every file and
left the process group; the interpreter's own teardown could still abort in the threads of gloo
and of the store ("terminate called without an active exception", exit 134), which was seen on
loaded machines after a run had finished well.
"""

import os
import sys

from vaswani.cli import main

status = main()
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
sys.exit(status)
