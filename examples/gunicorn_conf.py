"""gunicorn settings for gunicorn_app.py: each worker opens its seglog writer as it
starts (``post_fork``) and closes it as it exits (``worker_exit``).

    cd examples && gunicorn -w 4 -c gunicorn_conf.py gunicorn_app:app
"""

from typing import Any

bind = "127.0.0.1:8000"
workers = 4


def post_fork(server: Any, worker: Any) -> None:
    # in the worker, after the fork: the writer is this process's own. The app
    # module is imported here, and gunicorn then loads this same module as the app
    import gunicorn_app
    gunicorn_app.writer(opened_by="post_fork")


def worker_exit(server: Any, worker: Any) -> None:
    import gunicorn_app
    gunicorn_app.close_writer()
