"""Jobs on a cluster: run, exec, launch commands, hostfiles, sync, health, run records."""
