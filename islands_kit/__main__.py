import sys

from islands_kit.cli import main

sys.exit(main())
