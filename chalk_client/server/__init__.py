"""``chalk serve``: Chalk's HTTP API, SandboxFusion's ``/run_code`` and Judge0's API.

Needs the ``server`` extra (``pip install "chalk-queue[server]"``). The app is
``create_app()``; ``chalk serve`` runs it on uvicorn.
"""
