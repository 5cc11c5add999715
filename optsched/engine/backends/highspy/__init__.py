"""The ``highspy`` backend: the highspy build of HiGHS in a worker process.

The ``milp`` extra installs it; ``milp`` is also accepted as the backend's name (an alias).
"""
