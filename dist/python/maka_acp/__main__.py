"""`python -m maka_acp [ARGS...]`: runs the installed binary in this process's place."""

import os
import sys

from maka_acp import binary

if __name__ == "__main__":
    path = binary()
    os.execv(path, [path, *sys.argv[1:]])
