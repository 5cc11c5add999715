"""HiGHS MILP backend (the ``milp`` extra)."""
