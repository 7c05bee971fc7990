"""The example task: the agent must report Python version 3.12.11.

``scoring_script`` is its executable judge; ``judges`` registers a custom judge,
``final_message_contains``, to show how task packages add their own. The
worker imports the modules of every task package that register something
(``judges`` and ``contexts`` always); keeping this ``__init__`` empty keeps
scoring scripts quick to start.
"""
