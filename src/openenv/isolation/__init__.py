"""OS isolation: the Linux mechanisms that confine a process tree, and nothing above them.

- `bubblewrap`: whether bubblewrap works here, its mount options, the read-only binds an
  interpreter needs, and the user namespace a root caller runs its sandboxes in;
- `namespaces`: the namespaces and capability drop a fork-server child enters before it serves
  (and `python -m openenv.isolation.namespaces`, which locks a bubblewrap sandbox down);
- `cgroups`: memory, process and CPU ceilings for a whole process tree, and its kill;
- `spawn`: child processes that die with the trainer, whichever thread starts them;
- `limits`: `ResourceLimits`, the ceilings themselves.

Both the command sandbox (`openenv.sandbox`) and the providers (`openenv.providers`) build on
these modules; this package imports neither of them (see tests/unit/test_architecture.py).
"""
