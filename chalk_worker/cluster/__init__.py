"""The worker's half of the cluster protocol (``chalk_client.cluster`` is the client's).

Modules share their names with their counterparts where both sides have one:
``delivery`` (held messages given back, lost attempts told), ``leases`` (a job's
lease, taken, renewed, given up), ``reconcile`` (jobs whose message was lost,
sent again), ``presence`` (the worker's record for ``chalk health``). Of the
worker's own: ``consume`` (one message: lease, run, result), ``keeper``
(the thread that renews leases and takes over dead workers' jobs) and
``callbacks`` (the thread that sends batches' callbacks; its protocol is
``chalk_client.cluster.callbacks``).
"""
