"""The per-epoch engine, in the order an epoch runs: ``state`` (validated snapshot) ->
``candidates`` (the EpochProblem of ``problem``, scored by ``objective``) -> ``formulation`` (the
one linear model) -> ``backends`` (solvers) -> ``decode`` (the Decision) -> ``explain`` (its
explanations) -> ``check`` (the independent checker, with ``violations``); ``assurance`` (the
per-tenant signal) and ``epoch`` (``solve_epoch``, the pipeline and its time budget); ``apply``
(a decision applied as a host would). The public names are re-exported by :mod:`optsched`."""
