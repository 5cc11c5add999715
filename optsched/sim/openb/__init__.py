"""Native replay of the Alibaba openb GPU-sharing traces under the FGD paper's protocol.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent" (USENIX ATC'23) made the openb pod and node lists public. This package reads
them exactly (:mod:`.reader`), keeps the cluster at node and GPU level (:mod:`.cluster`),
measures the paper's fragmentation (:mod:`.frag`), replays the paper's arrival protocol
(:mod:`.protocol`) under its baselines (:mod:`.policies`) and under an optsched epoch model
solved with CP-SAT (:mod:`.optsched_policy`), and writes the report (:mod:`.report`).
"""
