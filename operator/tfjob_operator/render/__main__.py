import sys

from tfjob_operator.render.manifests import main

sys.exit(main())
