"""Keep Streamlit's collection after every script run cheap: what imports create is frozen out of its way.

Streamlit runs a full `gc.collect(2)` after every script run (`runner.postScriptGC`), and a full
collection walks every object the server holds: torch's, plotly's, the labs' modules. Measured on
this 2-core machine: 95-125 ms a run on Modes, Memory and Precision, 180-260 ms on Compile (dynamo
imported), all of it with the GIL held, so every other session's script and the event loop that
sends their figures waited too. Modules live as long as the server, so walking them again finds nothing.

`gc.freeze()` moves everything alive into a generation the collector skips. It is called at the
start of a run whenever modules were imported since the last freeze: the run before has finished
and been collected, so what is alive is mostly what the imports made. What other sessions hold at
that moment is frozen too; it is still freed when its last reference goes, and only a reference
cycle among it would outlive them. There are as many freezes as times new modules arrive (about
one per lab, the first time it is opened in this process), so that stays small.
"""

from __future__ import annotations

import gc
import sys
import threading

_lock = threading.Lock()
_modules_when_frozen = 0


def freeze_new_imports() -> bool:
    """Freeze the heap if modules were imported since the last freeze; True when it did."""
    global _modules_when_frozen
    with _lock:
        if len(sys.modules) == _modules_when_frozen:
            return False
        gc.freeze()
        _modules_when_frozen = len(sys.modules)
        return True
