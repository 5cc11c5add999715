"""Hosts: where decisions are carried out (the Slurm adapter, the HTTP policy service), each an
adapter over one loop (read -> snapshot -> decide -> check -> apply -> record) whose state
lives in the embedded SQLite store (:mod:`optsched.hosts.store`)."""
