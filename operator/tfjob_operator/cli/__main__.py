import sys

from tfjob_operator.cli.commands import main

sys.exit(main())
