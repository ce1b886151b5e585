"""The one place where scripts/*.py find their packages (h5py, numpy, matplotlib, torch).

The scripts start with `#!/usr/bin/env python3`, so the python3 first on PATH runs them: on
a machine with a venv, pyenv or conda first on PATH that interpreter usually lacks Debian's
python3-h5py, python3-matplotlib and python3-torch, which /usr/bin/python3 has
(scripts/setup.sh installs them). A script calls reexec_or_exit() when an import fails; it
runs the same script with the same arguments under /usr/bin/python3, once, or else exits 1
naming the missing module, the interpreter and the Debian packages.

    try:
        import h5py
    except ImportError:
        _python.reexec_or_exit("export_torch.py", "h5py", "python3-h5py")
"""

import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
# Set in the re-run script's environment, so that a missing package there ends it instead
# of re-running it again.
_GUARD = "COLONNADE_SCRIPTS_REEXEC"


def _is_system_python():
    """True for /usr/bin/python3 itself, not for a venv made from it (a venv's python3 is
    a link to /usr/bin/python3 but does not see Debian's packages)."""
    return (os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON)
            and sys.prefix == sys.base_prefix)


def reexec_or_exit(prog, module, packages):
    """Does not return: replaces this process with `/usr/bin/python3 SCRIPT ARGS...` when
    that can help, or exits 1 with `PROG: error: MODULE is not installed for PYTHON
    (Debian: apt-get install PACKAGES)`."""
    if (os.path.exists(SYSTEM_PYTHON) and not _is_system_python()
            and not os.environ.get(_GUARD)):
        script = os.path.abspath(sys.argv[0])
        env = dict(os.environ)
        env[_GUARD] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(SYSTEM_PYTHON, [SYSTEM_PYTHON, script] + sys.argv[1:], env)
    sys.exit("%s: error: %s is not installed for %s (Debian: apt-get install %s)"
             % (prog, module, sys.executable, packages))
