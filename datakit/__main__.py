"""``python -m datakit``: the ``datakit`` command, where its script is not on the PATH."""

import sys

if __name__ == "__main__":  # not in a worker started by spawn, which imports this module as __mp_main__
    from datakit._entry import datakit

    sys.exit(datakit())
