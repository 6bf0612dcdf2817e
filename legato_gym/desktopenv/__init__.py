"""legato's side of desktop-env (OSWorld's own code), shared by the local and the osworld backends.

desktop-env cannot share legato's interpreter (it pins gymnasium~=0.28 and numpy<2), so it lives in an
environment of its own, and what legato does with it is here, below both backends that use it:

- :mod:`.venv`: that environment, built by ``legato osworld setup`` and recorded (``recorded_python``), and
  the check that desktop-env's controllers, getters and metrics import there; :mod:`.probe` runs that check
  inside it.
- :mod:`.shim`: lets desktop-env's evaluators import without the heavy libraries a few metrics need.
- :mod:`.supplements`: getters and metrics that OSWorld's tasks name and the installed desktop-env lacks.
- :mod:`.session`: desktop-env's own ``SetupController`` and ``DesktopEnv.evaluate`` bound to a desktop that
  is already running, so that a task is set up and graded by OSWorld's code: the osworld backend's VMs, and
  the local backend's desktops with ``grader="osworld"``.

Importing this package imports nothing of desktop-env; :func:`.session.import_desktop_env` does, in its
interpreter.
"""
