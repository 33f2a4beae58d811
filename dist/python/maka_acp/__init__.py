"""maka-acp: an Agent Client Protocol (ACP v1) agent, as a native binary in a wheel.

The wheel installs the `maka-acp` executable into the environment's scripts folder (the
`bin/` of a venv, what `uvx maka-acp` runs); this module only finds it, for
`python -m maka_acp` and for programs that want its path.
"""

import os
import sysconfig

__all__ = ["binary"]


def binary() -> str:
    """The path of the installed `maka-acp` executable."""
    candidates = [sysconfig.get_path("scripts")]
    user = sysconfig.get_path("scripts", f"{os.name}_user")
    if user:
        candidates.append(user)
    for folder in candidates:
        path = os.path.join(folder, "maka-acp")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"maka-acp is not installed in {' or '.join(candidates)}")
