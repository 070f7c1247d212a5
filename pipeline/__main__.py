"""`python -m pipeline convert ...`"""

import sys

from pipeline.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
