"""The kombu edge: Chalk's Redis transports (plain and through Sentinel) and the stray
entries they drop. The only modules of the worker that import kombu.

``transport`` takes each message into a held list of its own consumer (nothing
is ever only in a worker's memory), ``sentinel`` does the same through Redis
Sentinel, ``entries`` tells a message from anything else a queue's list holds.
"""
