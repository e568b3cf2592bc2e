import sys

from vaswani.cli import main

sys.exit(main())
