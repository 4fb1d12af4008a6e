import sys

from sanctuary_local.cli import main

sys.exit(main())
