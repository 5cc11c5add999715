"""PuLP backend (the ``pulp`` extra): the neutral model through any MILP solver PuLP drives."""
