"""Replicas as processes: what the local backend and the Ray backend's replica actors share.

`podspec` turns a planned Pod manifest into the processes that stand in for it (argv, env with
Kubernetes' `$(VAR)` expansion, working directory, init containers first); `kubelet` runs them the
way a kubelet runs a pod's containers (in-place restarts, exit codes, one log file per replica).
Neither imports anything of a particular backend.
"""
