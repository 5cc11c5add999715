"""Hosts: what runs optsched against a real cluster.

The Slurm adapter (:mod:`optsched.hosts.slurm`, with ``slurmcli``, ``config`` and ``demo``)
carries decisions out over the one host loop (:mod:`optsched.hosts.loop`: read -> snapshot ->
decide -> check -> apply -> record); the HTTP policy service (:mod:`optsched.hosts.service`,
``optsched serve``) only decides, for a host that carries its decisions out itself. Both keep
their state in the embedded SQLite store (:mod:`optsched.hosts.store`); ``reasons`` is the text
both show operators.
"""
