"""How the process runs: exit codes, threads, serving until stopped, stalls, the PS memory check."""
