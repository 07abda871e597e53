import sys

from tfjob_operator.cli.main import main

sys.exit(main())
