import sys

from bertkit.cli import main

sys.exit(main())
