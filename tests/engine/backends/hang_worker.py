"""A solver worker that never answers (for the deadline tests of
``optsched.engine.backends.process``): each job starts a child process, writes the child's pid
to the file named by ``$OPTSCHED_TEST_PID_FILE`` and then waits far past any deadline, as a
solver binary that overshoots its own limit would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from optsched.engine.backends.process import serve


def hang(job: dict[str, Any]) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(os.environ["OPTSCHED_TEST_PID_FILE"]).write_text(f"{os.getpid()} {child.pid}")
    time.sleep(600)


if __name__ == "__main__":
    serve(hang)
