"""How a desktop worker is reached: the worker transport, below the backends and the vector env.

A desktop runs in a worker process (for the osworld backend, under desktop-env's own interpreter). What
carries requests to it and its screenshots back lives here, with no knowledge of any backend or of the vector
env: :mod:`.protocol` (the length-prefixed JSON frames and the config on the wire), :mod:`.handles` (the
:class:`~legato_gym.transport.handles.WorkerHandle` and ``WorkerLauncher`` interface a worker is driven
through), :mod:`.process` (workers as local child processes) and :mod:`.screens` (the shared-memory
screenshot buffer). The vector env's pool (:mod:`legato_gym.vector.pool`) and the osworld backend's
one-desktop driver (:mod:`legato_gym.backends.osworld.remote`) both build on it; the worker's own loop
(:mod:`legato_gym.vector.worker`) runs on the far side. Standard library and numpy only.
"""
